package intake

import (
	"os"
	"time"

	"github.com/rxedge/agent/movement"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	form := filepath.Join(t.TempDir(), "f.csv")
	os.WriteFile(form, []byte("ndc,schedule\n00406-0552-62,CII\n12345678901,\n"), 0o600)
	badForm := filepath.Join(t.TempDir(), "bad.csv")
	os.WriteFile(badForm, []byte("00406-0552-62,CX\n"), 0o600)
	for _, c := range []struct {
		name string
		o    Options
		want []string // fields named, in order
	}{
		{"off", Options{}, nil},
		{"loopback", Options{HL7: HL7Options{Listen: "127.0.0.1:2575"}}, nil},
		{"off by word", Options{HL7: HL7Options{Listen: "off"}}, nil},
		{"wildcard without hosts", Options{HL7: HL7Options{Listen: ":2575"}}, []string{"intake.hl7.listen"}},
		{"wildcard with hosts", Options{HL7: HL7Options{Listen: ":2575", AllowedHosts: []string{"10.0.0.0/8"}}}, nil},
		{"bad host", Options{HL7: HL7Options{Listen: ":2575", AllowedHosts: []string{"pos.example"}}}, []string{"intake.hl7.allowed_hosts"}},
		{"hosts without listener", Options{HL7: HL7Options{AllowedHosts: []string{"10.1.1.1"}}}, []string{"intake.hl7.allowed_hosts"}},
		{"cert without key", Options{HL7: HL7Options{Listen: "127.0.0.1:1", CertFile: "c.pem"}}, []string{"intake.hl7.cert_file"}},
		{"ca without cert", Options{HL7: HL7Options{Listen: "127.0.0.1:1", CAFile: "ca.pem"}}, []string{"intake.hl7.ca_file"}},
		{"negative", Options{HL7: HL7Options{Listen: "127.0.0.1:1", MaxConnections: -1}}, []string{"intake.hl7.max_connections"}},
		{"huge messages", Options{HL7: HL7Options{Listen: "127.0.0.1:1", MaxMessageBytes: 1 << 30}}, []string{"intake.hl7.max_message_bytes"}},
		{"folder without formulary", Options{ASAP: ASAPOptions{Dir: t.TempDir()}}, []string{"intake.asap.dir"}},
		{"folder with formulary", Options{ASAP: ASAPOptions{Dir: t.TempDir()}, Formulary: form}, nil},
		{"bad formulary", Options{Formulary: badForm}, []string{"intake.formulary"}},
	} {
		errs := c.o.Validate()
		var got []string
		for _, e := range errs {
			got = append(got, strings.SplitN(e, ":", 2)[0])
		}
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: %v, want problems with %v", c.name, errs, c.want)
		}
	}
	o := Options{HL7: HL7Options{Listen: "127.0.0.1:2575"}}
	o.Validate()
	if o.HL7.MaxConnections != DefaultMaxConnections || o.HL7.MaxMessageBytes != DefaultMaxMessageBytes || o.HL7.IdleTimeout != DefaultIdleTimeout || o.ASAP.PollInterval != DefaultPollInterval {
		t.Errorf("defaults not filled: %+v", o)
	}
}

func TestFormulary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f.csv")
	os.WriteFile(path, []byte("ndc,schedule,unit\n0406-0552-62,CII,EA\n12345-678-90,civ\n11111-2222-3,,ml\n00591054001,CII,\n"), 0o600)
	fm, err := LoadFormulary(path)
	if err != nil {
		t.Fatal(err)
	}
	for ndc, want := range map[string]Product{
		"00406055262": {"CII", "EA"}, "00406-0552-62": {"CII", "EA"}, "0406-0552-62": {"CII", "EA"},
		"0406055262":  {"CII", "EA"}, // bare 10 digits: only its 4-4-2 reading is listed
		"12345067890": {"CIV", ""}, "11111222203": {"", "ML"}, "99999999999": {}, "0591-0540-01": {"CII", ""},
	} {
		if got, _ := fm.Lookup(ndc); got != want {
			t.Errorf("Lookup(%s) = %+v, want %+v", ndc, got, want)
		}
	}
	if _, known := fm.Lookup("11111-2222-03"); !known {
		t.Error("an NDC listed without a schedule is not known")
	}
	// Errors name the line, never a value.
	for _, c := range []struct{ body, want string }{
		{"ndc,schedule\nSECRET99,CII\n", "line 2: the ndc is not an NDC"},
		{"ndc,schedule\n0406055262,CII\n", "line 2: the ndc is a bare 10-digit NDC"},
		{"00406-0552-62,CII,SECRET99\n", "line 1: the unit must be"},
		{"00406-0552-62,SECRET99\n", "line 1: the schedule must be"},
		{"00406-0552-62,CII,EA,SECRET99\n", "line 1: want 2 or 3 columns"},
	} {
		os.WriteFile(path, []byte(c.body), 0o600)
		_, err = LoadFormulary(path)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "SECRET99") {
			t.Errorf("%q: %v, want %q", c.body, err, c.want)
		}
	}
}

// TestFormularyPrepare resolves a bare 10-digit NDC the formulary knows,
// refuses one it does not (or knows twice), and refuses a unit other
// than the formulary's, naming the formulary's unit only.
func TestFormularyPrepare(t *testing.T) {
	fm := Formulary{"00591-0540-01": {Schedule: "CII", Unit: "EA"}, "05910-0540-01": {}, "12345-6789-01": {}, "12345-0678-90": {}}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	mv := func(ndc, unit string) *movement.Movement {
		return &movement.Movement{MovementID: "M1", Type: "dispense", NDC: ndc, Quantity: "1", Unit: unit, OccurredAt: "2026-03-01T09:30:00Z"}
	}
	for _, c := range []struct {
		ndc, unit    string
		want, asSent string // the stored ndc and ndc_as_sent; "" when refused
		field        string // the field refused
		unitRefusal  bool
	}{
		{"0591-0540-01", "EA", "00591-0540-01", "0591-0540-01", "", false},
		{"5910540001", "EA", "", "", "ndc", false},                     // none of its readings listed
		{"1234567890", "EA", "12345-0678-90", "1234567890", "", false}, // its 5-3-2 reading alone listed
		{"0591054001", "EA", "", "", "ndc", false},                     // its 4-4-2 and 5-3-2 readings both listed
		{"0591-0540-01", "ML", "", "", "unit", true},
		{"99999-9999-99", "ML", "99999-9999-99", "", "", false}, // not listed: any unit
	} {
		p, es, unit := fm.Prepare(mv(c.ndc, c.unit), "S0042", now)
		if c.field != "" {
			if len(es) != 1 || es[0].Field != c.field || unit != c.unitRefusal {
				t.Errorf("%s %s: %v (unit %v), want a refusal of %s", c.ndc, c.unit, es, unit, c.field)
			}
			if unit && !strings.Contains(es[0].Msg, "must be EA") {
				t.Errorf("%s %s: %q does not name the formulary's unit", c.ndc, c.unit, es[0].Msg)
			}
			continue
		}
		m, _ := movement.Decode(p.Payload)
		if es != nil || m.NDC != c.want || m.NDCAsSent != c.asSent {
			t.Errorf("%s %s: %v, stored %q as sent %q; want %q as sent %q", c.ndc, c.unit, es, m.NDC, m.NDCAsSent, c.want, c.asSent)
		}
	}
}

// TestExampleFormulary loads the example shipped in configs/.
func TestExampleFormulary(t *testing.T) {
	fm, err := LoadFormulary(filepath.Join("..", "configs", "formulary.example.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := fm.Lookup("00591054001"); p != (Product{Schedule: "CII", Unit: "EA"}) {
		t.Errorf("00591-0540-01: %+v", p)
	}
}
