package main

import (
	"io/fs"
	"os"
	"strings"
	"testing"
)

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
// exist yet; status still names the service's state.
func TestStatusBeforeTheFirstStart(t *testing.T) {
	dir := t.TempDir()
	_, stderr, code := cli(t, "status", "--data-dir", dir)
	if code != exitAttention || !strings.Contains(stderr, "service: ") || !strings.Contains(stderr, "no agent data file") {
		t.Errorf("exit %d, stderr %q; want exit %d naming the service state and the missing data file", code, stderr, exitAttention)
	}
}
