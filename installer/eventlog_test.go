package installer

import (
	"bytes"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"
)

type fakeSink struct{ events []string }

func (s *fakeSink) Info(id uint32, msg string) error    { return s.add("info", id, msg) }
func (s *fakeSink) Warning(id uint32, msg string) error { return s.add("warning", id, msg) }
func (s *fakeSink) Error(id uint32, msg string) error   { return s.add("error", id, msg) }
func (s *fakeSink) add(kind string, id uint32, msg string) error {
	s.events = append(s.events, fmt.Sprintf("%s %d %s", kind, id, msg))
	return nil
}

func TestEventHandler(t *testing.T) {
	var out bytes.Buffer
	sink := &fakeSink{}
	next := slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})
	log := slog.New(newEventHandler(next, sink)).With("store", "S0042")

	log.Debug("noise")
	log.Info("movement stored", "key", "ab12")
	log.Info("agent started", EventKey, "start", "version", "1.2.3")
	log.WithGroup("sync").Warn("central unreachable", "for", "5m0s")
	log.Error("quarantined", "key", "cd34", "reason", "permanent:too_large")

	want := []string{
		`info 1 msg="agent started" store=S0042 service_event=start version=1.2.3`,
		`warning 2 msg="central unreachable" store=S0042 sync.for=5m0s`,
		`error 3 msg=quarantined store=S0042 key=cd34 reason=permanent:too_large`,
	}
	if strings.Join(sink.events, "\n") != strings.Join(want, "\n") {
		t.Errorf("event log:\ngot  %q\nwant %q", sink.events, want)
	}
	if n := strings.Count(out.String(), "\n"); n != 4 {
		t.Errorf("next handler got %d records, want 4 (all but debug):\n%s", n, out.String())
	}
}

func TestEventLogHandlerOffWindows(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the event log is used on windows")
	}
	next := slog.NewJSONHandler(new(bytes.Buffer), nil)
	h, c, err := EventLogHandler(ServiceName, next)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if h != next {
		t.Errorf("got %T, want next itself", h)
	}
}
