package installer

import (
	"os"
	"path/filepath"
	"strings"
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

// TestServiceCanRead sets real DACLs: a data directory as install makes
// it names the service's virtual account; the key install writes is
// readable by it, one with only SYSTEM and the Administrators is not.
func TestServiceCanRead(t *testing.T) {
	if windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil {
		t.Skip("Wine keeps no file DACLs (it shows one made from the Unix mode); the Windows CI job runs this test")
	}
	p := DefaultPathsEnv("windows", func(string) string { return `C:\ProgramData` })
	plan := &Plan{GOOS: "windows", Paths: p}
	prepareWindows(plan)
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := (osHost{}).applyPerm(dir, plan.Dirs[1].Perm); err != nil {
		t.Fatal(err)
	}
	key, closed := filepath.Join(dir, "ledger.key"), filepath.Join(dir, "closed.key")
	os.WriteFile(key, []byte("k"), 0o600)
	os.WriteFile(closed, []byte("k"), 0o600)
	if err := (osHost{}).applyPerm(key, plan.LedgerKey.Perm); err != nil {
		t.Fatal(err)
	}
	adminsOnly := Perm{ACL: plan.LedgerKey.Perm.ACL[:2]}
	if err := (osHost{}).applyPerm(closed, adminsOnly); err != nil {
		t.Fatal(err)
	}
	acct, ok, err := ServiceCanRead(key, dir)
	if err != nil || !ok || !strings.Contains(strings.ToLower(acct), strings.ToLower(ServiceName)) {
		t.Fatalf("install's key: %q %v %v", acct, ok, err)
	}
	if _, ok, err := ServiceCanRead(closed, dir); err != nil || ok {
		t.Fatalf("a key the service may not read: %v %v", ok, err)
	}
	if open := ReadableByOthers(key, closed); len(open) != 0 {
		t.Fatalf("readable by every local user: %v", open)
	}
}
