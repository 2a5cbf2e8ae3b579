package doctor

import (
	"context"
	"strings"
	"testing"

	"github.com/rxedge/agent/headoffice/durability"
)

// TestDurabilityCheck: the check passes only on a report without findings
// to fix, warns on warnings, fails on errors, and is skipped (never passed)
// without access to central's system account or monitoring.
func TestDurabilityCheck(t *testing.T) {
	ok := durability.Judge("test", []durability.Server{{Name: "n1", JetStream: true, SyncAlways: true, ClusterSize: 3},
		{Name: "n2", JetStream: true, SyncAlways: true, ClusterSize: 3}, {Name: "n3", JetStream: true, SyncAlways: true, ClusterSize: 3}},
		[]durability.Stream{{Name: "RX_MOVEMENTS", Replicas: 3}, {Name: "RX_ARCHIVE", Replicas: 3}})
	if c := durabilityCheck(ok); !c.OK || c.Warning || c.Skipped {
		t.Errorf("durable cluster: %+v", c)
	}
	single := durability.Judge("test", []durability.Server{{Name: "n1", JetStream: true, SyncAlways: true, ClusterSize: 1}},
		[]durability.Stream{{Name: "RX_MOVEMENTS", Replicas: 1}})
	if c := durabilityCheck(single); c.OK || !c.Warning || c.Fix == "" {
		t.Errorf("single server: %+v", c)
	}
	unsynced := durability.Judge("test", []durability.Server{{Name: "n1", JetStream: true, ClusterSize: 1}},
		[]durability.Stream{{Name: "RX_MOVEMENTS", Replicas: 1}})
	if c := durabilityCheck(unsynced); c.OK || c.Warning || !strings.Contains(c.Detail, "n1: ") || !strings.Contains(c.Fix, "sync_interval: always") {
		t.Errorf("server without sync always: %+v", c)
	}
	o := Options{}
	o.defaults()
	if c := durable(context.Background(), o, nil, ""); c.OK || !c.Skipped || !strings.Contains(c.Fix, "--system-user") {
		t.Errorf("without access: %+v", c)
	}
}
