package provision_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/rxedge/agent/headoffice/provision"
)

// TestTemplateIsGenerated keeps the checked-in production template equal
// to the generator's output for its example roster.
func TestTemplateIsGenerated(t *testing.T) {
	stores, err := provision.ReadRoster(strings.NewReader("# example\nS0001\n\nS0002 # second\n"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := provision.CentralConfig(&b, stores, 1); err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(productionConfig)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("RXEDGE_UPDATE_TEMPLATE") == "1" {
		if err := os.WriteFile(productionConfig, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(have, b.Bytes()) {
		t.Errorf("%s is not the generator's output for S0001 and S0002: run RXEDGE_UPDATE_TEMPLATE=1 go test ./headoffice/provision -run TestTemplateIsGenerated", productionConfig)
	}
}

func TestReadRosterRefuses(t *testing.T) {
	for _, in := range []string{"", "S1\nS1\n", "S1.>\n", "RX\n", "fleet\n", "audit\n", "AUDIT\n", "witness\n", "WITNESS\n"} {
		if _, err := provision.ReadRoster(strings.NewReader(in)); err == nil {
			t.Errorf("roster %q: no error", in)
		}
	}
}
