package daemon

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rxedge/agent/settings"
)

// TestIngestPortInUseNamesTheFlag: an ingest address another program
// holds is refused with the flag that moves it.
func TestIngestPortInUseNamesTheFlag(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	opts := settings.Options{StoreID: "S0042", DataDir: filepath.Join(t.TempDir(), "d"), IngestListen: ln.Addr().String()}
	err = Run(context.Background(), opts, nil, Hooks{})
	if err == nil || !strings.Contains(err.Error(), "--ingest HOST:PORT") {
		t.Fatalf("Run on a port in use: %v, want the --ingest hint", err)
	}
}
