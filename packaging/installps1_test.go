package packaging

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInstallPS1StopsServiceBeforeCopy reads install.ps1 (no PowerShell
// runs in CI): a running service is stopped, and waited for, before the
// new .exe is copied over the old one, and started again after install.
func TestInstallPS1StopsServiceBeforeCopy(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("windows", "install.ps1"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	at := func(what string) int {
		i := strings.Index(s, what)
		if i < 0 {
			t.Fatalf("install.ps1 lacks %q", what)
		}
		return i
	}
	stop, wait, cp, start := at(`Stop-Service -Name "rxedge-agent"`), at(`WaitForStatus("Stopped"`), at("Copy-Item -Force"), at("& $exe start")
	if !(stop < wait && wait < cp && cp < start) {
		t.Errorf("install.ps1 order: stop %d, wait %d, copy %d, start %d; want stop, wait, copy, start", stop, wait, cp, start)
	}
}
