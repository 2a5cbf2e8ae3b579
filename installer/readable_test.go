package installer

import (
	"slices"
	"testing"
)

func TestBroadReaders(t *testing.T) {
	const svc = "S-1-5-80-1235733905-4259525939-1509107125-1929003510-981884878"
	for _, tc := range []struct {
		name, sddl string
		want       []string
	}{
		{"install's config dir", "D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;" + svc + ")", nil},
		{"install's token, owner and group too", "O:BAG:SYD:P(A;;FA;;;SY)(A;;FA;;;BA)(A;;0x120089;;;" + svc + ")", nil},
		{"ProgramData's inherited default", "D:AI(A;OICIID;FA;;;SY)(A;OICIID;FA;;;BA)(A;OICIIOID;GA;;;CO)(A;OICIID;0x1200a9;;;BU)(A;CIID;DCLCRPCR;;;BU)", []string{"Users"}},
		{"users may only create (write, no read)", "D:P(A;;FA;;;SY)(A;CI;0x100116;;;BU)", nil},
		{"everyone full control", "D:(A;;FA;;;WD)", []string{"Everyone"}},
		{"everyone by SID string", "D:(A;;0x120089;;;S-1-1-0)", []string{"Everyone"}},
		{"generic read for authenticated users", "D:(A;;GR;;;AU)", []string{"Authenticated Users"}},
		{"generic read bit in hex", "D:(A;;0x80000000;;;IU)", []string{"Interactive"}},
		{"read data right alone", "D:(A;;CC;;;AN)", []string{"Anonymous"}},
		{"inherit-only entries do not apply to the object", "D:(A;OICIIO;GA;;;WD)", nil},
		{"a deny entry is no grant", "D:(D;;FA;;;WD)(A;;FA;;;SY)", nil},
		{"no DACL", "D:NO_ACCESS_CONTROL", []string{"Everyone (no DACL)"}},
		{"a SACL after the DACL", "D:P(A;;FA;;;SY)(A;;FR;;;BG)S:(AU;FA;FA;;;WD)", []string{"Guests"}},
		{"two groups, each once", "D:(A;;FR;;;BU)(A;;FA;;;BU)(A;;FR;;;WD)", []string{"Users", "Everyone"}},
		{"no DACL part", "O:SY", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := broadReaders(tc.sddl); !slices.Equal(got, tc.want) {
				t.Errorf("broadReaders(%q) = %q, want %q", tc.sddl, got, tc.want)
			}
		})
	}
}

// TestServiceSIDsAndReads: the service's account is found from the data
// directory's DACL as install sets it (and as a LocalSystem install sets
// it), and a key file's DACL is judged for that account.
func TestServiceSIDsAndReads(t *testing.T) {
	const svc = "S-1-5-80-1235733905-4259525939-1509107125-1929003510-981884878"
	dataDir := "D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1301bf;;;" + svc + ")"
	if got := serviceSIDs(dataDir); !slices.Equal(got, []string{svc}) {
		t.Errorf("serviceSIDs(install's data dir) = %v", got)
	}
	if got := serviceSIDs("D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICIIO;GA;;;CO)(A;OICI;0x1200a9;;;BU)"); !slices.Equal(got, []string{sidSystem}) {
		t.Errorf("serviceSIDs(LocalSystem data dir) = %v", got)
	}
	if got := serviceSIDs("D:P(A;OICI;FA;;;SY)(A;OICI;0x1301bf;;;LS)"); !slices.Equal(got, []string{sidLocalService}) {
		t.Errorf("serviceSIDs(LocalService data dir) = %v", got)
	}
	for _, tc := range []struct {
		name, sddl, sid string
		want            bool
	}{
		{"install's key", "D:P(A;;FA;;;SY)(A;;FA;;;BA)(A;;0x120089;;;" + svc + ")", svc, true},
		{"a key inheriting the data directory's", "D:AI(A;ID;FA;;;SY)(A;ID;FA;;;BA)(A;ID;0x1301bf;;;" + svc + ")", svc, true},
		{"administrators only", "D:P(A;;FA;;;SY)(A;;FA;;;BA)", svc, false},
		{"write only", "D:P(A;;FA;;;SY)(A;;0x100116;;;" + svc + ")", svc, false},
		{"inherit-only", "D:P(A;;FA;;;SY)(A;OICIIO;FA;;;" + svc + ")", svc, false},
		{"a deny entry is no grant", "D:P(D;;FA;;;" + svc + ")", svc, false},
		{"SYSTEM by alias", "D:P(A;;FA;;;SY)", sidSystem, true},
		{"no DACL", "D:NO_ACCESS_CONTROL", svc, true},
	} {
		if got := sidReads(tc.sddl, tc.sid); got != tc.want {
			t.Errorf("%s: sidReads = %v, want %v", tc.name, got, tc.want)
		}
	}
}
