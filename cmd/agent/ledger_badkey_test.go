package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/daemon"
	"github.com/rxedge/agent/notary"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/syncbuf"
)

// placeSnapshot describes what is at path without following a link.
func placeSnapshot(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		return "absent"
	}
	s := fi.Mode().String()
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(path)
		s += " -> " + target
	case fi.Mode().IsRegular() && fi.Size() < 1<<20:
		b, _ := os.ReadFile(path)
		s += " " + string(b)
	default:
		s += " " + fi.ModTime().String()
	}
	return s
}

// TestAgentRefusesABadKeyFile: the agent started with something that is
// not its key file in the key file's place (a link to a valid key of its
// own store, a dangling link, a directory, a huge file, garbage, a pipe)
// refuses it with a clear error, logged at start and shown by status, and
// signs nothing; it does not take it for a lost key nor write over it,
// nor over what a link points to; movements are still accepted (the key
// stops only the signing).
func TestAgentRefusesABadKeyFile(t *testing.T) {
	elsewhere := t.TempDir()
	valid := filepath.Join(elsewhere, "valid.key")
	if _, err := notary.CreateKey(valid, cliStore); err != nil {
		t.Fatal(err)
	}
	validBytes, _ := os.ReadFile(valid)
	cases := []struct {
		name, want string
		make       func(t *testing.T, path string)
	}{
		{"symlink to a valid key", "symbolic link", func(t *testing.T, p string) { symlinkOrSkip(t, valid, p) }},
		{"dangling symlink", "symbolic link", func(t *testing.T, p string) { symlinkOrSkip(t, filepath.Join(elsewhere, "gone"), p) }},
		{"directory", "is a directory", func(t *testing.T, p string) { os.Mkdir(p, 0o700) }},
		{"huge", "not a key file", func(t *testing.T, p string) {
			f, _ := os.Create(p)
			f.Truncate(64 << 20)
			f.Close()
		}},
		{"garbage", "not a key file", func(t *testing.T, p string) { os.WriteFile(p, []byte("\x00\x01garbage"), 0o600) }},
	}
	if runtime.GOOS != "windows" {
		cases = append(cases, struct {
			name, want string
			make       func(t *testing.T, path string)
		}{"named pipe", "not a regular file", mkfifo})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			keyFile := filepath.Join(dir, notary.KeyFileName)
			c.make(t, keyFile)
			before := placeSnapshot(t, keyFile)

			var logs syncbuf.Buffer
			stop := startDaemonLog(t, localOptions(t, dir), slog.New(slog.NewJSONHandler(&logs, nil)))
			var st status.Status
			if err := json.Unmarshal([]byte(mustCLI(t, "status", "--json", "--data-dir", dir)), &st); err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(t.TempDir(), "m.jsonl")
			os.WriteFile(f, []byte(`{"movement_id":"BADKEY-1","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`+"\n"), 0o600)
			mustCLI(t, "enqueue", "--data-dir", dir, "-f", f)
			stop()

			if st.Ledger == nil || st.Ledger.PublicKey != "" || st.Ledger.KeyLostAt != nil || !strings.Contains(st.Ledger.Error, c.want) || !strings.Contains(st.Ledger.Error, keyFile) {
				t.Fatalf("status ledger %+v, want the refusal %q of %s", st.Ledger, c.want, keyFile)
			}
			if !strings.Contains(logs.String(), "LEDGER_KEY_UNUSABLE") || strings.Contains(logs.String(), "LEDGER_KEY_LOST") || strings.Contains(logs.String(), "LEDGER_KEY_CREATED") {
				t.Fatalf("log:\n%s", logs.String())
			}
			if after := placeSnapshot(t, keyFile); after != before {
				t.Fatalf("the key file's place changed:\nbefore %s\nafter  %s", before, after)
			}
			if b, _ := os.ReadFile(valid); !bytes.Equal(b, validBytes) {
				t.Fatal("the link's target changed")
			}
			if st, _ := stoppedStatus(t, "--data-dir", dir); st.HighestSeq != 1 || st.Ledger.Signed != 0 || st.Ledger.LastCheckpointAt != nil {
				t.Fatalf("after the run: seq %d, ledger %+v", st.HighestSeq, st.Ledger)
			}
		})
	}
}

func symlinkOrSkip(t *testing.T, target, path string) {
	if err := os.Symlink(target, path); err != nil {
		t.Skipf("this system makes no symbolic links for this user: %v", err)
	}
	if _, err := os.Lstat(path); err != nil {
		t.Skipf("the symbolic link made is not there (Wine makes none): %v", err)
	}
}

// startDaemonLog is startDaemon with the agent's log.
func startDaemonLog(t *testing.T, opts settings.Options, log *slog.Logger) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, opts, log, daemon.Hooks{Ready: func(string) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("daemon.Run: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("the agent did not become ready within 10s")
	}
	return func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("daemon.Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("the agent did not stop within 15s")
		}
	}
}
