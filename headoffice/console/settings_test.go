package console_test

import (
	"encoding/pem"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/rxedge/agent/headoffice/console"
)

// TestSettings reads the console's section of a settings file into
// options, and refuses what is wrong, every problem at once, each
// naming its field.
func TestSettings(t *testing.T) {
	ca, _ := newCA(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), 0o600)
	var s console.Settings
	in := `
listen: 10.0.0.2:7480
auth: proxy
proxy: {header: X-Auth-User, from: [10.0.0.5, 10.0.1.0/28]}
roles:
  viewer: [pat@chain.example, olga@chain.example]
  operator: [olga@chain.example]
  auditor: [ines@chain.example]
bulk: {concurrency: 4, spread: 5m}
`
	if err := yaml.Unmarshal([]byte(in), &s); err != nil {
		t.Fatal(err)
	}
	o, err := s.Options("console")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"pat@chain.example": {"viewer"}, "olga@chain.example": {"operator", "viewer"}, "ines@chain.example": {"auditor"}}
	if !reflect.DeepEqual(o.Roles, want) || o.ProxyHeader != "X-Auth-User" || o.BulkConcurrency != 4 ||
		!reflect.DeepEqual(o.ProxyFrom, []netip.Prefix{netip.MustParsePrefix("10.0.0.5/32"), netip.MustParsePrefix("10.0.1.0/28")}) {
		t.Errorf("options %+v", o)
	}

	var bad console.Settings
	in = `
tls: {client_ca_file: ` + caFile + `}
proxy: {from: [proxy.example]}
bulk: {spread: 48h}
`
	if err := yaml.Unmarshal([]byte(in), &bad); err != nil {
		t.Fatal(err)
	}
	_, err = bad.Options("console")
	for _, field := range []string{"console.tls.client_ca_file", "console.proxy.from", "console.bulk.spread"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("error %v does not name %s", err, field)
		}
	}
}
