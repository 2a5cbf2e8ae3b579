package installer

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestResolveConfig(t *testing.T) {
	dir := t.TempDir()
	present := filepath.Join(dir, "agent.yaml")
	os.WriteFile(present, []byte("data_dir: x\n"), 0o600)
	missing := filepath.Join(dir, "none.yaml")
	cases := []struct {
		name, flag, def string
		want            string
		wantErr         error
		wantText        []string
	}{
		{"flag", present, missing, present, nil, nil},
		{"default", "", present, present, nil, nil},
		{"missing default", "", missing, "", ErrConfigMissing, []string{missing, "agent install", "configs/agent.example.yaml", "--config"}},
		{"missing flag", missing, present, "", ErrConfigMissing, []string{missing}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveConfig(tc.flag, tc.def)
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %q, %v; want %q, %v", got, err, tc.want, tc.wantErr)
			}
			for _, w := range tc.wantText {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	t.Run("unreadable", func(t *testing.T) {
		if runtime.GOOS == "windows" || os.Geteuid() == 0 {
			t.Skip("needs a non-root unix user: root reads any file")
		}
		os.Chmod(present, 0)
		defer os.Chmod(present, 0o600)
		if _, err := resolveConfig(present, ""); err == nil || !strings.Contains(err.Error(), "root/Administrator") {
			t.Errorf("got %v, want a hint to run elevated", err)
		}
	})
}
