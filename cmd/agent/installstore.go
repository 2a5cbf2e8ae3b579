package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/rxedge/agent/installer"
	"github.com/rxedge/agent/internal/cli"
)

// storeFlags are the intakes and the operators install writes into a new
// config, as an unattended install (the MSI's properties) gives them.
type storeFlags struct {
	hl7Listen    string // intake.hl7.listen
	hl7Allowed   string // intake.hl7.allowed_hosts, comma-separated
	asapDir      string // intake.asap.dir
	formulary    string // intake.formulary
	operatorKeys string // remote.operator_keys, comma-separated
}

func (f *storeFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.hl7Listen, "hl7-listen", "", "HL7 v2 MLLP listener address host:port, written into a new config (intake.hl7.listen)")
	fs.StringVar(&f.hl7Allowed, "hl7-allowed-hosts", "", "addresses or CIDR prefixes that may connect to the HL7 listener, comma-separated (intake.hl7.allowed_hosts)")
	fs.StringVar(&f.asapDir, "asap-dir", "", "ASAP 4.2 drop folder, an absolute path (intake.asap.dir; needs --formulary)")
	fs.StringVar(&f.formulary, "formulary", "", "formulary CSV file, an absolute path (intake.formulary)")
	fs.StringVar(&f.operatorKeys, "operator-keys", "", "NKey public keys of the operators who may sign remote commands, comma-separated (remote.operator_keys)")
}

// given reports whether any of the flags was set.
func (f storeFlags) given() bool { return f != storeFlags{} }

// check refuses a relative path: the service does not run in this
// directory.
func (f storeFlags) check() error {
	for _, p := range []struct{ flag, path string }{{"--asap-dir", f.asapDir}, {"--formulary", f.formulary}} {
		if p.path != "" && !filepath.IsAbs(p.path) {
			return cli.UsageError("%s %q: give an absolute path (the service does not run in this directory)", p.flag, p.path)
		}
	}
	return nil
}

// apply writes the flags given into a config template; install then
// checks the config as run does, so a bad address or key is refused
// before anything is installed.
func (f storeFlags) apply(tmpl []byte) ([]byte, error) {
	t := installer.ParseTemplate(tmpl)
	for _, kv := range [][2]string{{"intake.hl7.listen", f.hl7Listen}, {"intake.asap.dir", f.asapDir}, {"intake.formulary", f.formulary}} {
		if kv[1] == "" {
			continue
		}
		if err := t.Set(kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("install: could not set %s in the example config (%v)", kv[0], err)
		}
	}
	for _, kv := range [][2]string{{"intake.hl7.allowed_hosts", f.hl7Allowed}, {"remote.operator_keys", f.operatorKeys}} {
		if list := splitList(kv[1]); len(list) > 0 {
			if err := t.SetList(kv[0], list); err != nil {
				return nil, fmt.Errorf("install: could not set %s in the example config (%v)", kv[0], err)
			}
		}
	}
	return t.Bytes(), nil
}
