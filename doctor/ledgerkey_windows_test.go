package doctor

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/windows"
)

// setDACL gives path the protected DACL of sddl.
func setDACL(t *testing.T, path, sddl string) {
	t.Helper()
	sd, err := windows.SecurityDescriptorFromString(sddl)
	if err != nil {
		t.Fatal(err)
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		t.Fatal(err)
	}
	if err := windows.SetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, nil, nil, dacl, nil); err != nil {
		t.Fatal(err)
	}
}

// TestLedgerKeyPrivateDACL sets real DACLs: a data directory as install
// makes it (the service's virtual account may modify it) and key files
// with install's DACL, one Users may read, and one the service may not
// read.
func TestLedgerKeyPrivateDACL(t *testing.T) {
	if windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil {
		t.Skip("Wine keeps no file DACLs (it shows one made from the Unix mode); the Windows CI job runs this test")
	}
	// NT SERVICE\rxedge-agent (installer's serviceSID).
	const svc = "S-1-5-80-1235733905-4259525939-1509107125-1929003510-981884878"
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	setDACL(t, dir, "D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1301bf;;;"+svc+")")
	for _, tc := range []struct {
		name, sddl, state, text string
	}{
		{"install's key", "D:P(A;;FA;;;SY)(A;;FA;;;BA)(A;;0x120089;;;" + svc + ")", "ok", "readable by "},
		{"Users may read", "D:P(A;;FA;;;SY)(A;;FA;;;BA)(A;;0x120089;;;" + svc + ")(A;;0x120089;;;BU)", "fail", "readable by every local user"},
		{"the service may not read", "D:P(A;;FA;;;SY)(A;;FA;;;BA)", "fail", "/grant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := filepath.Join(dir, tc.name+".key")
			if err := os.WriteFile(key, []byte("k"), 0o600); err != nil {
				t.Fatal(err)
			}
			setDACL(t, key, tc.sddl)
			want(t, keyPrivate(key, dir), tc.state, tc.text)
		})
	}
}

// privateDir gives dir the protected DACL install gives the data
// directory, with the test's own account as the service's, so what is made
// in it inherits a private DACL whatever the temporary directory's is.
func privateDir(t *testing.T, dir string) {
	t.Helper()
	u, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		t.Fatal(err)
	}
	setDACL(t, dir, "D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1301bf;;;"+u.User.Sid.String()+")")
}
