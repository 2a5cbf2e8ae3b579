package hub_test

import (
	"path/filepath"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// The shipped configs must fsync on their own, for whoever runs
// nats-server with them directly rather than through this package.
func TestConfigFilesSyncAlways(t *testing.T) {
	for _, name := range []string{"hub-dev.conf", "production.conf.template"} {
		t.Run(name, func(t *testing.T) {
			o, err := server.ProcessConfigFile(filepath.Join("..", "configs", "nats", name))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if !o.JetStream {
				t.Error("JetStream is not enabled")
			}
			if !o.SyncAlways {
				t.Error("jetstream sync_interval is not always")
			}
			if o.StoreDir != "REPLACE_WITH_STORE_DIR" {
				t.Errorf("store_dir = %q, want the placeholder REPLACE_WITH_STORE_DIR", o.StoreDir)
			}
		})
	}
}
