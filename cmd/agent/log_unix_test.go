//go:build unix

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/settings"
)

// TestServeLogsForJournald: when stderr is the stream journald connected
// (JOURNAL_STREAM names it), every line carries its syslog priority, in
// the chosen format; a stderr redirected elsewhere gets plain lines.
func TestServeLogsForJournald(t *testing.T) {
	for _, tt := range []struct {
		name, format string
		journal      bool
		info, warn   string
	}{
		{"journal text", settings.LogText, true, "<6>time=", "<4>time="},
		{"journal json", settings.LogJSON, true, `<6>{"time":`, `<4>{"time":`},
		{"redirected", settings.LogJSON, false, `{"time":`, `{"time":`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var st unix.Stat_t
			if err := unix.Fstat(int(f.Fd()), &st); err != nil {
				t.Fatal(err)
			}
			env := fmt.Sprintf("%d:%d", st.Dev, st.Ino+1)
			if tt.journal {
				env = fmt.Sprintf("%d:%d", st.Dev, st.Ino)
			}
			t.Setenv("JOURNAL_STREAM", env)
			opts := settings.Options{LogLevel: "info", LogFormat: tt.format}
			serve(&cli.Streams{In: strings.NewReader(""), Out: os.Stdout, Err: f}, opts, func(ctx context.Context, log *slog.Logger) error {
				log.Debug("HIDDEN")
				log.Info("HELLO", "store", "S1")
				log.Warn("CAREFUL", "store", "S1")
				return nil
			})
			b, err := os.ReadFile(f.Name())
			if err != nil {
				t.Fatal(err)
			}
			var hello, careful string
			for _, l := range strings.Split(string(b), "\n") {
				switch {
				case strings.Contains(l, "HIDDEN"):
					t.Errorf("a debug line at level info: %q", l)
				case strings.Contains(l, "HELLO"):
					hello = l
				case strings.Contains(l, "CAREFUL"):
					careful = l
				}
			}
			if !strings.HasPrefix(hello, tt.info) || !strings.HasPrefix(careful, tt.warn) {
				t.Errorf("got\n%s\nwant the info line to start %q and the warning %q", b, tt.info, tt.warn)
			}
		})
	}
}
