package control

import (
	"strings"
	"testing"
)

func TestPipeSDDL(t *testing.T) {
	const base = "D:P(A;;GA;;;SY)(A;;GA;;;BA)"
	// NT SERVICE\rxedge-agent: the SID Windows derives from the service name.
	const service = "S-1-5-80-1653316893-2914563424-4034384960-3197429138-1318476347"
	for _, tc := range []struct {
		name, owner, want string
	}{
		{"no owner", "", base},
		{"LocalSystem adds no entry", "S-1-5-18", "O:S-1-5-18" + base},
		{"Administrators adds no entry", "S-1-5-32-544", "O:S-1-5-32-544" + base},
		{"the service's virtual account", service, "O:" + service + base + "(A;;GA;;;" + service + ")"},
		{"a foreground user", "S-1-5-21-1004336348-1177238915-682003330-1001", "O:S-1-5-21-1004336348-1177238915-682003330-1001" + base + "(A;;GA;;;S-1-5-21-1004336348-1177238915-682003330-1001)"},
		{"an alias is not a SID", "WD", base},
		{"an ACE spliced into the SID", "S-1-5-21-1)(A;;GA;;;WD", base},
		{"an SDDL string", "D:(A;;GA;;;WD)", base},
		{"a truncated SID", "S-1-5", base},
		{"an empty sub-authority", "S-1-5--1", base},
		{"a huge sub-authority", "S-1-5-" + strings.Repeat("9", 30), base},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PipeSDDL(tc.owner)
			if got != tc.want {
				t.Errorf("PipeSDDL(%q) = %q, want %q", tc.owner, got, tc.want)
			}
			// Whatever the owner, the DACL is protected (nothing inherited)
			// and never grants Everyone, Users, Authenticated Users,
			// anonymous or network logons.
			if _, dacl, _ := strings.Cut(got, "D:"); !strings.HasPrefix(dacl, "P(") {
				t.Errorf("PipeSDDL(%q) = %q: DACL is not protected", tc.owner, got)
			}
			for _, bad := range []string{";WD)", ";BU)", ";AU)", ";AN)", ";NU)", ";IU)"} {
				if strings.Contains(got, bad) {
					t.Errorf("PipeSDDL(%q) = %q grants %s", tc.owner, got, bad)
				}
			}
			if n := strings.Count(got, "(A;"); n > 3 {
				t.Errorf("PipeSDDL(%q) = %q has %d entries, want at most 3", tc.owner, got, n)
			}
		})
	}
}

func TestPipeName(t *testing.T) {
	const svc = `C:\ProgramData\RxEdge\data`
	want := PipeName(svc)
	if !strings.HasPrefix(want, PipePrefix) || len(want) != len(PipePrefix)+16 {
		t.Fatalf("PipeName(%q) = %q, want %s and 16 hex digits", svc, want, PipePrefix)
	}
	if want != `\\.\pipe\rxedge-agent-`+want[len(PipePrefix):] {
		t.Fatalf("PipeName(%q) = %q is not in the local pipe namespace", svc, want)
	}
	// The same directory, spelled otherwise, is the same agent.
	for _, same := range []string{
		`c:\programdata\rxedge\data`,
		`C:\PROGRAMDATA\RXEDGE\DATA`,
		`C:\ProgramData\RxEdge\data\`,
		`C:\ProgramData\RxEdge\data\\`,
		`C:/ProgramData/RxEdge/data`,
	} {
		if got := PipeName(same); got != want {
			t.Errorf("PipeName(%q) = %q, want %q (same directory as %q)", same, got, want, svc)
		}
	}
	// Other directories are other agents, spaces and all.
	seen := map[string]string{want: svc}
	for _, other := range []string{
		`C:\ProgramData\RxEdge\data2`,
		`C:\ProgramData\RxEdge`,
		`D:\ProgramData\RxEdge\data`,
		`C:\Program Data\RxEdge\data`,
		`C:\ProgramData\RxEdge Test\data`,
		`C:\Users\pharmacist\AppData\Local\RxEdge\data`,
		`C:\`,
	} {
		got := PipeName(other)
		if prev, dup := seen[got]; dup {
			t.Errorf("PipeName(%q) = PipeName(%q) = %q: two agents would share a pipe", other, prev, got)
		}
		seen[got] = other
		if strings.ContainsAny(got[len(PipePrefix):], ` \/:`) {
			t.Errorf("PipeName(%q) = %q carries path characters", other, got)
		}
	}
}

func TestTrustedPipeOwner(t *testing.T) {
	const self = "S-1-5-21-1004336348-1177238915-682003330-1001"
	for _, tc := range []struct {
		name, owner string
		want        bool
	}{
		{"LocalSystem", "S-1-5-18", true},
		{"Administrators", "S-1-5-32-544", true},
		{"the service's SID", "S-1-5-80-1235733905-4259525939-1509107125-1929003510-981884878", true},
		{"this user (a foreground agent)", self, true},
		{"another user", "S-1-5-21-1004336348-1177238915-682003330-1002", false},
		{"Users", "S-1-5-32-545", false},
		{"Everyone", "S-1-1-0", false},
		{"LocalService", "S-1-5-19", false},
		{"a bad service SID", "S-1-5-80-x", false},
		{"empty", "", false},
	} {
		if got := TrustedPipeOwner(tc.owner, self); got != tc.want {
			t.Errorf("%s: TrustedPipeOwner(%q) = %v, want %v", tc.name, tc.owner, got, tc.want)
		}
	}
	if TrustedPipeOwner("", "") {
		t.Error("TrustedPipeOwner of empty owner and self = true")
	}
}
