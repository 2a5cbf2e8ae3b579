package installer

import (
	"syscall"
	"testing"

	"golang.org/x/sys/windows"
)

// TestEscapeArgMatchesSyscall: the dry run's image path is built with
// escapeArg; mgr.CreateService builds the real one with syscall.EscapeArg.
func TestEscapeArgMatchesSyscall(t *testing.T) {
	for _, s := range []string{"", "run", "--config", `C:\ProgramData\RxEdge\agent.yaml`, `C:\Program Files\RxEdge\rxedge-agent.exe`, `C:\My Dir\`, `a"b`, `a\"b c`, "tab\there"} {
		if got, want := escapeArg(s), syscall.EscapeArg(s); got != want {
			t.Errorf("escapeArg(%q) = %s, syscall.EscapeArg = %s", s, got, want)
		}
	}
}

// TestSDDLParses: Windows accepts every DACL the plan renders.
func TestSDDLParses(t *testing.T) {
	p := mustPrepare(t, windowsSpec())
	for _, pm := range []Perm{p.Dirs[0].Perm, p.Dirs[1].Perm, p.Token.Perm, p.Config.Perm} {
		sd, err := windows.SecurityDescriptorFromString(pm.SDDL())
		if err != nil {
			t.Errorf("%s: %v", pm.SDDL(), err)
			continue
		}
		if _, _, err := sd.DACL(); err != nil {
			t.Errorf("%s: DACL: %v", pm.SDDL(), err)
		}
	}
}

// TestVirtualAccountSID: Windows resolves the virtual account name to the
// SID the plan computed (NT SERVICE names resolve even before the service
// exists).
func TestVirtualAccountSID(t *testing.T) {
	sid, _, _, err := windows.LookupSID("", `NT SERVICE\TrustedInstaller`)
	if err != nil {
		t.Skip(err)
	}
	if got, want := sid.String(), serviceSID("TrustedInstaller"); got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
