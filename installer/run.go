package installer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/kardianos/service"
	"github.com/rxedge/agent/internal/version"
)

// StopTimeout is how long Stop waits for the agent to finish in-flight
// work: publishes are keyed, so one abandoned at the deadline is resent
// after the restart and stored once.
const StopTimeout = 10 * time.Second

// EventKey is the log attribute that marks a service start or stop record;
// EventLogHandler forwards those records to the Windows Event Log along with
// every warning and error.
const EventKey = "service_event"

var (
	// ErrStopTimeout: the run function did not return within the stop
	// timeout after its context was cancelled.
	ErrStopTimeout = errors.New("installer: stop timed out")
	// ErrExitedEarly: the run function returned although nobody asked it
	// to stop. The service manager restarts the agent.
	ErrExitedEarly = errors.New("installer: the agent stopped on its own")
)

// Run runs the agent: run(ctx) until the service manager or a signal asks
// it to stop. It is what `agent run` calls, the same way from a terminal
// and under systemd or the Windows SCM. Stopping cancels ctx and waits up to
// stopTimeout for run to return; Run never calls os.Exit for a requested
// stop. When run returns on its own, Run returns ErrExitedEarly (wrapping
// run's error) so the process exits non-zero and is restarted; a Windows
// service then ends the process with exit code 1, which the SCM counts as a
// failure. A nil log means slog.Default().
func Run(name string, run func(ctx context.Context) error, stopTimeout time.Duration, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	p := newProgram(run, stopTimeout, log)
	p.managed = UnderServiceManager()
	if handled, err := runService(name, p); handled {
		return err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	// After the first signal a second one ends the process at once: what
	// was acknowledged is in bbolt already, and publishes are keyed.
	return p.serve(sigs, func() { signal.Stop(sigs) })
}

// program adapts a run function to kardianos's service.Interface: Start
// launches run in a goroutine it owns and returns at once; Stop cancels
// run's context and waits for it with a deadline.
type program struct {
	run         func(context.Context) error
	stopTimeout time.Duration
	log         *slog.Logger
	// onEarlyExit, when set, is called from run's goroutine after run
	// returned without a stop request (the Windows service exits there).
	onEarlyExit func(error)
	// managed: a service manager runs the agent and restarts it when it
	// stops on its own (not a console run).
	managed bool

	mu       sync.Mutex
	cancel   context.CancelFunc
	stopping bool
	started  time.Time
	done     chan struct{} // closed when run has returned
	err      error         // run's result, set before done is closed
	early    bool          // run returned before Stop
}

func newProgram(run func(context.Context) error, stopTimeout time.Duration, log *slog.Logger) *program {
	return &program{run: run, stopTimeout: stopTimeout, log: log, done: make(chan struct{})}
}

// Start launches run and returns without waiting for it.
func (p *program) Start(service.Service) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel != nil {
		return errors.New("installer: start: already started")
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.started = time.Now()
	v := version.Get()
	p.log.Info("agent started", EventKey, "start", "version", v.Version, "commit", v.Commit)
	go func() {
		err := p.run(ctx)
		p.mu.Lock()
		p.err = err
		p.early = !p.stopping
		early := p.early
		p.mu.Unlock()
		close(p.done)
		if early {
			msg := "agent stopped on its own"
			if p.managed {
				msg += "; the service manager restarts it"
			}
			p.log.Error(msg, EventKey, "exit", "err", err)
			if p.onEarlyExit != nil {
				p.onEarlyExit(err)
			}
		}
	}()
	return nil
}

// Stop cancels run's context and waits up to the stop timeout for run to
// return. It returns nil when run ended because of the stop (with nil or
// a context error), and never exits the process.
func (p *program) Stop(service.Service) error {
	p.mu.Lock()
	p.stopping = true
	cancel := p.cancel
	p.mu.Unlock()
	if cancel == nil {
		return nil // never started
	}
	cancel()
	p.log.Info("agent stopping", EventKey, "stopping")
	timer := time.NewTimer(p.stopTimeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		p.log.Error("agent did not stop in time; in-flight publishes are abandoned and resent after restart", EventKey, "stop", "timeout", p.stopTimeout)
		return fmt.Errorf("%w: the agent did not return within %s; in-flight publishes stay pending and are resent (keyed) after restart", ErrStopTimeout, p.stopTimeout)
	}
	p.mu.Lock()
	err, early := p.err, p.early
	p.mu.Unlock()
	if early {
		return fmt.Errorf("%w: %w", ErrExitedEarly, errOrNil(err))
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		p.log.Error("agent stopped with an error", EventKey, "stop", "err", err)
		return fmt.Errorf("installer: stop: %w", err)
	}
	p.log.Info("agent stopped", EventKey, "stop", "uptime", time.Since(p.started).Round(time.Second).String())
	return nil
}

// errOrNil names a nil error from an early exit.
func errOrNil(err error) error {
	if err == nil {
		return errors.New("run returned nil without a stop request")
	}
	return err
}

// serve runs the program outside the Windows SCM: it starts, waits for a
// signal on sigs or for run to return, calls released, and stops.
func (p *program) serve(sigs <-chan os.Signal, released func()) error {
	if err := p.Start(nil); err != nil {
		return err
	}
	select {
	case sig := <-sigs:
		p.log.Info("signal received; stopping (a second one ends the process at once)", "signal", sig.String())
	case <-p.done:
	}
	released()
	return p.Stop(nil)
}
