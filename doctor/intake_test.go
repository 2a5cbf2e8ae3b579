package doctor

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/settings"
)

func TestIntakeChecks(t *testing.T) {
	o := Options{Timeout: 2 * time.Second, Command: "rxedge-agent"}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	closed.Close()

	good := t.TempDir()
	for _, d := range []string{"done", "rejected"} {
		os.Mkdir(filepath.Join(good, d), 0o700)
	}
	noSub := t.TempDir()
	for _, c := range []struct {
		name   string
		in     intake.Options
		ok     []bool
		detail string
	}{
		{"listening", intake.Options{HL7: intake.HL7Options{Listen: ln.Addr().String()}}, []bool{true}, "accepting"},
		{"nothing listens", intake.Options{HL7: intake.HL7Options{Listen: closedAddr}}, []bool{false}, "nothing accepts"},
		{"missing certificate", intake.Options{HL7: intake.HL7Options{Listen: ln.Addr().String(), CertFile: "/nonexistent.pem", KeyFile: "/nonexistent.key"}}, []bool{false}, "cert_file"},
		{"folder ready", intake.Options{ASAP: intake.ASAPOptions{Dir: good}}, []bool{true}, "writable"},
		{"folder missing", intake.Options{ASAP: intake.ASAPOptions{Dir: filepath.Join(good, "nope")}}, []bool{false}, "not a directory"},
		{"no done folder", intake.Options{ASAP: intake.ASAPOptions{Dir: noSub}}, []bool{false}, "done"},
		{"none configured", intake.Options{}, nil, ""},
	} {
		got := intakeChecks(context.Background(), o, settings.Options{Intake: c.in})
		if len(got) != len(c.ok) {
			t.Errorf("%s: %d checks, want %d", c.name, len(got), len(c.ok))
			continue
		}
		for i, ch := range got {
			if ch.OK != c.ok[i] || !strings.Contains(ch.Detail, c.detail) || (!ch.OK && ch.Fix == "") {
				t.Errorf("%s: %+v, want ok=%v with %q in the detail and a fix when failed", c.name, ch, c.ok[i], c.detail)
			}
		}
	}
	// The probe leaves nothing behind.
	ents, _ := os.ReadDir(good)
	if len(ents) != 2 {
		t.Errorf("the folder holds %d entries after the check, want done and rejected only", len(ents))
	}
}
