package durability

import (
	"strings"
	"testing"
)

// TestSummarize: a report sums up as passed only without findings to
// fix, as a warning on warnings, failed on errors, naming the server and
// the fix.
func TestSummarize(t *testing.T) {
	ok := Judge("test", []Server{{Name: "n1", JetStream: true, SyncAlways: true, ClusterSize: 3},
		{Name: "n2", JetStream: true, SyncAlways: true, ClusterSize: 3}, {Name: "n3", JetStream: true, SyncAlways: true, ClusterSize: 3}},
		[]Stream{{Name: "RX_MOVEMENTS", Replicas: 3}, {Name: "RX_ARCHIVE", Replicas: 3}})
	if s := Summarize(ok); !s.OK || s.Warning {
		t.Errorf("durable cluster: %+v", s)
	}
	single := Judge("test", []Server{{Name: "n1", JetStream: true, SyncAlways: true, ClusterSize: 1}},
		[]Stream{{Name: "RX_MOVEMENTS", Replicas: 1}})
	if s := Summarize(single); s.OK || !s.Warning || s.Fix == "" {
		t.Errorf("single server: %+v", s)
	}
	unsynced := Judge("test", []Server{{Name: "n1", JetStream: true, ClusterSize: 1}},
		[]Stream{{Name: "RX_MOVEMENTS", Replicas: 1}})
	if s := Summarize(unsynced); s.OK || s.Warning || !strings.Contains(s.Detail, "n1: ") || !strings.Contains(s.Fix, "sync_interval: always") {
		t.Errorf("server without sync always: %+v", s)
	}
}
