package listen

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	r := Rule{Field: "x.listen", Example: "127.0.0.1:1, or \"off\"", Guard: "also set x.token_file"}
	for _, tt := range []struct {
		addr    string
		guarded bool
		want    string // "" = no problem
	}{
		{"127.0.0.1:8717", false, ""},
		{"[::1]:8717", false, ""},
		{"localhost:8717", false, ""},
		{"127.9.9.9:0", false, ""},
		{"0.0.0.0:8717", false, "x.listen: 0.0.0.0:8717 is not a loopback address: also set x.token_file"},
		{"0.0.0.0:8717", true, ""},
		{":8717", false, "x.listen: :8717 is not a loopback address"},
		{"pos.example:8717", false, "is not a loopback address"},
		{"pos.example:8717", true, ""},
		{"8717", false, `x.listen: must be host:port, e.g. 127.0.0.1:1, or "off"`},
		{"127.0.0.1:port", true, "x.listen: the port is not a number"},
		{"127.0.0.1:", false, "the port is not a number"},
		{"127.0.0.1:65536", false, "the port is not a number"},
		{"", false, "must be host:port"},
	} {
		err := r.Check(tt.addr, tt.guarded)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("Check(%q, %v) = %v, want none", tt.addr, tt.guarded, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("Check(%q, %v) = %v, want %q", tt.addr, tt.guarded, err, tt.want)
		}
	}
}

func TestToken(t *testing.T) {
	dir := t.TempDir()
	good, short := filepath.Join(dir, "good"), filepath.Join(dir, "short")
	os.WriteFile(good, []byte(" "+strings.Repeat("g", 16)+"\n"), 0o600)
	os.WriteFile(short, []byte("hunter2\n"), 0o600)
	for _, tt := range []struct {
		name, value, file, token, problem string
	}{
		{"none", "", "", "", ""},
		{"value", strings.Repeat("v", 16), "", strings.Repeat("v", 16), ""},
		{"short value", "hunter2", "", "hunter2", "m.token: is shorter than 16 characters"},
		{"file", "", good, strings.Repeat("g", 16), ""},
		{"short file", "", short, "hunter2", "m.token_file: the token in " + short + " is shorter than 16 characters"},
		{"missing file", "", filepath.Join(dir, "none"), "", "m.token_file: "},
		{"both", strings.Repeat("v", 16), good, "", "m.token: set m.token or m.token_file, not both"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := Token("m", tt.value, tt.file)
			if tok != tt.token {
				t.Errorf("token %q, want %q", tok, tt.token)
			}
			switch {
			case tt.problem == "" && err != nil:
				t.Errorf("problem %v, want none", err)
			case tt.problem != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.problem)):
				t.Errorf("problem %v, want %q", err, tt.problem)
			case err != nil && strings.Contains(err.Error(), "hunter2"):
				t.Errorf("problem %v shows the token", err)
			}
		})
	}
}
