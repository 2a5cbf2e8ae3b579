package main

import (
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/status"
)

// TestUnknownFlagSuggests: a mistyped flag is refused with the flag it is
// closest to, as a mistyped setting is.
func TestUnknownFlagSuggests(t *testing.T) {
	_, stderr, code := runCLI(t, "status", "--data-dri", t.TempDir())
	if code != cli.ExitUsage || !strings.Contains(stderr, "unknown flag: --data-dri (did you mean --data-dir?)") {
		t.Errorf("exit %d, stderr %q; want exit 2 offering --data-dir", code, stderr)
	}
}

// TestDefaultConfigBehindAClosedDirectory: a user who may not enter
// /etc/rxedge gets the administrator hint, not "which agent?".
func TestDefaultConfigBehindAClosedDirectory(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"readable", nil, true},
		{"directory not readable", &fs.PathError{Op: "stat", Path: defaultConfigPath(), Err: fs.ErrPermission}, true},
		{"missing", &fs.PathError{Op: "stat", Path: defaultConfigPath(), Err: fs.ErrNotExist}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := defaultConfigExists(func(string) (os.FileInfo, error) { return nil, tc.err })
			if got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestStatusBeforeTheFirstStart: right after install the data file does not
// exist yet; status still names the service's state, in words (no Go
// value), exits 1 as every command that finds no data file does (`dlq
// list` too), and with --json writes a JSON document on stdout.
func TestStatusBeforeTheFirstStart(t *testing.T) {
	dir := t.TempDir()
	_, stderr, code := runCLI(t, "status", "--data-dir", dir)
	if code != cli.ExitError || !strings.Contains(stderr, "service: ") || !strings.Contains(stderr, "no agent data file") || strings.Contains(stderr, "&{") {
		t.Errorf("exit %d, stderr %q; want exit %d naming the service state and the missing data file", code, stderr, cli.ExitError)
	}
	if _, _, dcode := runCLI(t, "dlq", "list", "--data-dir", dir); dcode != code {
		t.Errorf("dlq list exits %d on the same missing file, status %d", dcode, code)
	}
	out, _, code := runCLI(t, "status", "--json", "--data-dir", dir)
	var doc struct {
		Error   string          `json:"error"`
		Service *status.Service `json:"service"`
	}
	if code != cli.ExitError || json.Unmarshal([]byte(out), &doc) != nil || !strings.Contains(doc.Error, "no agent data file") || doc.Service == nil || doc.Service.State == "" {
		t.Errorf("status --json: exit %d, stdout %q; want exit %d and a JSON document with the error and the service", code, out, cli.ExitError)
	}
	// A data directory that does not exist at all: the same.
	_, stderr, code = runCLI(t, "status", "--data-dir", filepath.Join(dir, "nope"))
	if code != cli.ExitError || strings.Contains(stderr, "&{") {
		t.Errorf("status of a missing directory: exit %d, stderr %q", code, stderr)
	}
}

// TestFlagUsagesRenderAsWritten: no flag's usage holds a backquote, which
// pflag's help takes for the name of the flag's value (doctor's --dev
// rendered as "--dev run --dev").
func TestFlagUsagesRenderAsWritten(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: the usage %q holds a backquote", c.CommandPath(), f.Name, f.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(&cli.Streams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}))
}
