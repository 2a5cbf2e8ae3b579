package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rxedge/agent/internal/cli"
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

// TestSettingsTypeErrorHidesThePassword: a list of servers written as one
// text, with a password in it, is refused by run and by doctor without
// the password in what either prints.
func TestSettingsTypeErrorHidesThePassword(t *testing.T) {
	const secret = "Hunter2-s0042"
	config := filepath.Join(t.TempDir(), "agent.yaml")
	body := "store_id: S0042\ndata_dir: " + t.TempDir() + "\ningest:\n  listen: \"off\"\nnats:\n  servers: nats://s0042:" + secret + "@central.example:4222\n"
	if err := os.WriteFile(config, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"run", "--config", config}, {"doctor", "--config", config}} {
		stdout, stderr, code := runCLI(t, args...)
		out := stdout + stderr
		if code == cli.ExitOK || !strings.Contains(out, "nats.servers: want a list of text") {
			t.Errorf("%s: exit %d, want a refusal naming nats.servers:\n%s", args[0], code, out)
		}
		if strings.Contains(out, "Hunter2") {
			t.Errorf("%s prints the password:\n%s", args[0], out)
		}
	}
}
