package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rxedge/agent/settings"
)

// TestDevIgnoresTheInstalledConfig: `run --dev` on a machine with an
// installed service must not load that service's config (and then refuse
// its nats.servers).
func TestDevIgnoresTheInstalledConfig(t *testing.T) {
	installed := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(installed, []byte("store_id: S0107\ndata_dir: /var/lib/rxedge\nnats:\n  servers: [nats://central.chain:4222]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := defaultConfigPath
	defaultConfigPath = func() string { return installed }
	t.Cleanup(func() { defaultConfigPath = old })

	var f runFlags
	c, err := f.devConfig()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.NATS.Servers) != 0 || c.StoreID != "" {
		t.Errorf("--dev read the installed config: servers %v, store %q", c.NATS.Servers, c.StoreID)
	}
	f.configPath = installed
	if c, err = f.devConfig(); err != nil || c.StoreID != "S0107" {
		t.Errorf("--dev --config: store %q, %v; want the given file read", c.StoreID, err)
	}
}

func TestServiceNeedsToken(t *testing.T) {
	for _, tc := range []struct {
		name    string
		service bool
		o       settings.Options
		refuse  bool
	}{
		{"console without token", false, settings.Options{IngestListen: "127.0.0.1:8717"}, false},
		{"service without token", true, settings.Options{IngestListen: "127.0.0.1:8717"}, true},
		{"service with token", true, settings.Options{IngestListen: "127.0.0.1:8717", IngestToken: "0123456789abcdef"}, false},
		{"service without ingest", true, settings.Options{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := serviceNeedsToken(tc.service, tc.o); (err != nil) != tc.refuse {
				t.Errorf("got %v, want refusal %v", err, tc.refuse)
			}
		})
	}
}

// TestRunDevHubPortInUseNamesTheFlag: a trial whose hub address another
// program holds is refused with the flag that moves it.
func TestRunDevHubPortInUseNamesTheFlag(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, stderr, code := runCLI(t, "run", "--dev", "--dev-hub", ln.Addr().String(), "--data-dir", t.TempDir(), "--ingest", "127.0.0.1:0")
	if code == 0 || !strings.Contains(stderr, "--dev-hub 127.0.0.1:4223") {
		t.Errorf("exit %d, stderr %q; want a refusal naming --dev-hub", code, stderr)
	}
}
