package installer

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/windows"
)

// TestReadableByOthers sets real DACLs on files: the token's (as install
// sets it) is private; one that inherits from a directory where Users may
// read, as a config copied into %ProgramData% by hand does, is not.
func TestReadableByOthers(t *testing.T) {
	if windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil {
		t.Skip("Wine keeps no file DACLs (it shows one made from the Unix mode); the Windows CI job runs this test")
	}
	dir := t.TempDir()
	p := DefaultPathsEnv("windows", func(string) string { return `C:\ProgramData` })
	plan := &Plan{GOOS: "windows", Paths: p}
	prepareWindows(plan)

	private, open := filepath.Join(dir, "private"), filepath.Join(dir, "open")
	os.WriteFile(private, []byte("x"), 0o600)
	os.WriteFile(open, []byte("x"), 0o600)
	if err := (osHost{}).applyPerm(private, plan.Token.Perm); err != nil {
		t.Fatal(err)
	}
	usersRead := Perm{ACL: append(append([]ACE(nil), plan.Token.Perm.ACL...), ACE{SID: "S-1-5-32-545", Name: "Users", Rights: "R"})}
	if err := (osHost{}).applyPerm(open, usersRead); err != nil {
		t.Fatal(err)
	}
	got := ReadableByOthers(private, open, filepath.Join(dir, "missing"))
	if len(got) != 1 || got[0] != open {
		t.Errorf("got %v, want [%s]", got, open)
	}
}
