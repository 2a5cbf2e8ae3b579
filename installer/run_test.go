package installer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestProgramStartStop(t *testing.T) {
	cases := []struct {
		name        string
		run         func(ctx context.Context, release <-chan struct{}) error
		stopAfter   time.Duration // when Stop is called, after Start
		wantErr     error         // nil: Stop returns nil
		wantText    string
		wantStopDur time.Duration // how long Stop takes
	}{
		{
			name:      "returns ctx error promptly",
			run:       func(ctx context.Context, _ <-chan struct{}) error { <-ctx.Done(); return ctx.Err() },
			stopAfter: time.Minute,
		},
		{
			name: "finishes in-flight work within the timeout",
			run: func(ctx context.Context, _ <-chan struct{}) error {
				<-ctx.Done()
				time.Sleep(9 * time.Second) // draining publishes
				return nil
			},
			stopAfter:   time.Minute,
			wantStopDur: 9 * time.Second,
		},
		{
			name: "ignores cancellation",
			// Blocks until the test releases it, long after the timeout.
			run:         func(ctx context.Context, release <-chan struct{}) error { <-release; return nil },
			stopAfter:   time.Second,
			wantErr:     ErrStopTimeout,
			wantText:    "10s",
			wantStopDur: 10 * time.Second,
		},
		{
			name: "fails while stopping",
			run: func(ctx context.Context, _ <-chan struct{}) error {
				<-ctx.Done()
				return errors.New("close queue: disk full")
			},
			stopAfter: time.Second,
			wantText:  "disk full",
		},
		{
			name: "dies on its own",
			run: func(ctx context.Context, _ <-chan struct{}) error {
				time.Sleep(time.Second)
				return errors.New("open queue: locked")
			},
			stopAfter: time.Minute,
			wantErr:   ErrExitedEarly,
			wantText:  "open queue: locked",
		},
		{
			name:      "returns nil on its own",
			run:       func(ctx context.Context, _ <-chan struct{}) error { return nil },
			stopAfter: time.Minute,
			wantErr:   ErrExitedEarly,
			wantText:  "without a stop request",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				defer func() { close(release); synctest.Wait() }()
				run := func(ctx context.Context) error { return tc.run(ctx, release) }
				p := newProgram(run, StopTimeout, discard)
				start := time.Now()
				if err := p.Start(nil); err != nil {
					t.Fatal(err)
				}
				if d := time.Since(start); d != 0 {
					t.Errorf("Start blocked for %s", d)
				}
				time.Sleep(tc.stopAfter)
				stopAt := time.Now()
				err := p.Stop(nil)
				if d := time.Since(stopAt); d != tc.wantStopDur {
					t.Errorf("Stop took %s, want %s", d, tc.wantStopDur)
				}
				switch {
				case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
					t.Errorf("Stop: got %v, want %v", err, tc.wantErr)
				case tc.wantErr == nil && tc.wantText == "" && err != nil:
					t.Errorf("Stop: got %v, want nil", err)
				case tc.wantText != "" && (err == nil || !strings.Contains(err.Error(), tc.wantText)):
					t.Errorf("Stop: got %v, want an error mentioning %q", err, tc.wantText)
				}
			})
		})
	}
}

func TestProgramStopBeforeStart(t *testing.T) {
	p := newProgram(func(context.Context) error { return nil }, StopTimeout, discard)
	if err := p.Stop(nil); err != nil {
		t.Errorf("Stop before Start: %v", err)
	}
}

func TestProgramStartTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProgram(func(ctx context.Context) error { <-ctx.Done(); return nil }, StopTimeout, discard)
		p.Start(nil)
		if err := p.Start(nil); err == nil {
			t.Error("second Start succeeded")
		}
		p.Stop(nil)
	})
}

func TestProgramEarlyExitHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newProgram(func(context.Context) error { return errors.New("boom") }, StopTimeout, discard)
		got := make(chan error, 1)
		p.onEarlyExit = func(err error) { got <- err }
		p.Start(nil)
		synctest.Wait()
		select {
		case err := <-got:
			if err == nil || err.Error() != "boom" {
				t.Errorf("hook got %v", err)
			}
		default:
			t.Fatal("early-exit hook not called")
		}
		// A requested stop does not call the hook.
		q := newProgram(func(ctx context.Context) error { <-ctx.Done(); return nil }, StopTimeout, discard)
		q.onEarlyExit = func(err error) { t.Error("hook called on a requested stop") }
		q.Start(nil)
		q.Stop(nil)
		synctest.Wait()
	})
}

func TestServe(t *testing.T) {
	t.Run("signal stops", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sigs := make(chan os.Signal, 1)
			p := newProgram(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, StopTimeout, discard)
			done := make(chan error)
			released := false
			go func() { done <- p.serve(sigs, func() { released = true }) }()
			time.Sleep(time.Hour)
			sigs <- syscall.SIGTERM
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
			if !released {
				t.Error("signals not released after the first")
			}
		})
	})
	t.Run("run failure ends serve", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := newProgram(func(ctx context.Context) error { return errors.New("bind 127.0.0.1:8714: in use") }, StopTimeout, discard)
			err := p.serve(make(chan os.Signal), func() {})
			if !errors.Is(err, ErrExitedEarly) || !strings.Contains(err.Error(), "in use") {
				t.Errorf("serve: got %v, want ErrExitedEarly with the cause", err)
			}
		})
	})
}

// TestEarlyExitNamesTheRestarterOnlyUnderOne: a console run that fails
// must not say a service manager restarts it.
func TestEarlyExitNamesTheRestarterOnlyUnderOne(t *testing.T) {
	for _, managed := range []bool{false, true} {
		t.Run(fmt.Sprint("managed=", managed), func(t *testing.T) {
			var buf bytes.Buffer
			p := newProgram(func(context.Context) error { return errors.New("boom") }, StopTimeout, slog.New(slog.NewTextHandler(&buf, nil)))
			p.managed = managed
			exited := make(chan struct{})
			p.onEarlyExit = func(error) { close(exited) }
			if err := p.Start(nil); err != nil {
				t.Fatal(err)
			}
			<-exited
			if got := strings.Contains(buf.String(), "restarts it"); got != managed {
				t.Errorf("log says the service manager restarts it: %v, want %v:\n%s", got, managed, buf.String())
			}
		})
	}
}
