package intake

import (
	"os"
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
	os.WriteFile(path, []byte("ndc,schedule\n0406-0552-62,CII\n12345-678-90,civ\n11111-2222-3,\n"), 0o600)
	fm, err := LoadFormulary(path)
	if err != nil {
		t.Fatal(err)
	}
	for ndc, want := range map[string]string{
		"00406055262": "CII", "00406-0552-62": "CII", "0406-0552-62": "CII",
		"12345067890": "CIV", "11111222203": "", "99999999999": "",
	} {
		if got := fm.Schedule(ndc); got != want {
			t.Errorf("Schedule(%s) = %q, want %q", ndc, got, want)
		}
	}
	if _, known := fm["11111222203"]; !known {
		t.Error("an NDC listed without a schedule is not known")
	}
	// Errors name the line, never a value.
	os.WriteFile(path, []byte("ndc,schedule\nSECRET99,CII\n"), 0o600)
	_, err = LoadFormulary(path)
	if err == nil || !strings.Contains(err.Error(), "line 2") || strings.Contains(err.Error(), "SECRET99") {
		t.Errorf("bad NDC: %v", err)
	}
}
