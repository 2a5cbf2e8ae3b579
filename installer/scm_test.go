package installer

import "testing"

func TestServiceSID(t *testing.T) {
	cases := []struct {
		name string
		want string
	}{
		// Well-known: `sc showsid TrustedInstaller`.
		{"TrustedInstaller", "S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464"},
		// Case does not matter: the name is upper-cased first.
		{"trustedinstaller", "S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := serviceSID(tc.name); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestWindowsAccountSID(t *testing.T) {
	cases := []struct {
		name string
		want string
		ok   bool
	}{
		{`NT SERVICE\rxedge-agent`, serviceSID("rxedge-agent"), true},
		{`nt service\RXEDGE-AGENT`, serviceSID("rxedge-agent"), true},
		{"LocalSystem", sidSystem, true},
		{`NT AUTHORITY\LocalService`, sidLocalService, true},
		{`NT AUTHORITY\NetworkService`, sidNetworkService, true},
		{`NT SERVICE\other`, "", false},
		{`STORE\alice`, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := windowsAccountSID(tc.name)
			if got != tc.want || ok != tc.ok {
				t.Errorf("got %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestEscapeArg pins the quoting of syscall.EscapeArg (compared with the
// real one on Windows in install_windows_test.go).
func TestEscapeArg(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", `""`},
		{"run", "run"},
		{`C:\ProgramData\RxEdge\agent.yaml`, `C:\ProgramData\RxEdge\agent.yaml`},
		{`C:\Program Files\RxEdge\agent.exe`, `"C:\Program Files\RxEdge\agent.exe"`},
		{`C:\My Dir\`, `"C:\My Dir\\"`},
		{`a"b`, `a\"b`},
		{`a\"b c`, `"a\\\"b c"`},
		{"tab\there", "\"tab\there\""},
	}
	for _, tc := range cases {
		if got := escapeArg(tc.in); got != tc.want {
			t.Errorf("escapeArg(%q): got %s, want %s", tc.in, got, tc.want)
		}
	}
}
