package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// TestJournalPriorities: each line starts with the syslog priority of its
// level, and what follows is the line the format writes.
func TestJournalPriorities(t *testing.T) {
	for _, format := range []string{JSON, Text} {
		var b bytes.Buffer
		log := slog.New(New(&b, Options{Format: format, Level: slog.LevelDebug, Journal: true})).With("store", "S1")
		log.Debug("D")
		log.Info("I")
		log.Warn("W", "n", 1)
		log.Error("E")
		log.Log(t.Context(), slog.LevelError+4, "X")
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		want := []string{"<7>", "<6>", "<4>", "<3>", "<3>"}
		if len(lines) != len(want) {
			t.Fatalf("%s: %d lines, want %d:\n%s", format, len(lines), len(want), b.String())
		}
		for i, l := range lines {
			rest, ok := strings.CutPrefix(l, want[i])
			if !ok || !strings.Contains(rest, "S1") {
				t.Errorf("%s line %d: got %q, want prefix %s and the store", format, i, l, want[i])
			}
			if format == JSON {
				var m map[string]any
				if err := json.Unmarshal([]byte(rest), &m); err != nil {
					t.Errorf("line %d after the prefix is not JSON: %v", i, err)
				}
			} else if !strings.HasPrefix(rest, "time=") {
				t.Errorf("line %d is not text: %q", i, rest)
			}
		}
	}
}

func TestLevelAndPlainOutput(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(New(&b, Options{Format: Text, Level: slog.LevelWarn}))
	log.Info("hidden")
	log.Warn("shown")
	if got := b.String(); strings.Contains(got, "hidden") || !strings.HasPrefix(got, "time=") || !strings.Contains(got, "level=WARN msg=shown") {
		t.Errorf("got %q", got)
	}
}
