package provision_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/reconcile"
	"github.com/rxedge/agent/remote"
	"github.com/rxedge/agent/status"
)

// TestAuditorReconciles runs the reconciliation as the production
// configuration's audit user, from its own account, under each layout: it
// reads the store's archive by name (it may not list the streams) and the
// fleet view through its API prefix, and finds the one sequence missing.
func TestAuditorReconciles(t *testing.T) {
	for _, n := range layouts {
		t.Run(fmt.Sprintf("partitions=%d", n), func(t *testing.T) {
			h := startProduction(t, n)
			a := dial(t, h.URL(), storeA)
			au := dial(t, h.URL(), audit)
			ctx := testContext(t)
			for seq := uint64(1); seq <= 3; seq++ {
				m := central.Message{Store: "S0001", Key: fmt.Sprintf("%032x", seq), Digest: fmt.Sprintf("%064x", seq), Seq: seq, EnqueuedAt: time.Now(), Payload: []byte(`{}`)}
				if _, err := a.js.PublishMsg(ctx, m.Msg()); err != nil {
					t.Fatalf("store A publishes movement %d: %v", seq, err)
				}
			}
			if err := remote.PublishSummary(ctx, a.nc, "S0001", &status.Status{StoreID: "S0001", HighestSeq: 4}); err != nil {
				t.Fatal(err)
			}
			ad := dial(t, h.URL(), admin)
			arch, err := ad.js.Stream(ctx, archive("S0001", n))
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				info, err := arch.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if info.State.Msgs == 3 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s holds %d messages after 20 s, want 3 (awaited: the source copying them)", archive("S0001", n), info.State.Msgs)
				}
			}
			rep, err := reconcile.Run(ctx, reconcile.Options{Conn: au.nc, APIPrefix: central.AuditAPIPrefix, Archives: central.ArchiveStreams(n), Stores: []string{"S0001"}})
			if err != nil {
				t.Fatalf("reconcile as the auditor: %v", err)
			}
			var s *reconcile.StoreReport
			for i := range rep.Stores {
				if rep.Stores[i].Store == "S0001" {
					s = &rep.Stores[i]
				}
			}
			if s == nil || s.Highest != 4 || s.Held != 3 || s.Missing != 1 || rep.OK() {
				t.Errorf("report %+v, S0001 %+v; want highest 4, 3 held, sequence 4 missing and unexplained", rep, s)
			}
			// Listing the streams is not the auditor's: the server
			// refuses it as a permissions violation.
			short, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if _, err := reconcile.Run(short, reconcile.Options{Conn: au.nc, APIPrefix: central.AuditAPIPrefix}); err == nil {
				t.Error("the auditor listed the streams")
			}
			au.wantViolation(t, `Publish to "`+central.AuditAPIPrefix+`STREAM.NAMES"`)
		})
	}
}

// TestAuditorCannotPileUpConsumers: the auditor's grant to create
// consumers on the archives cannot restrict their settings, so the
// archive's own limit bounds how many it can leave behind in central's
// account; reconciliation still reads with what is left.
func TestAuditorCannotPileUpConsumers(t *testing.T) {
	h := startProduction(t, 1)
	au := dial(t, h.URL(), audit)
	for i := range central.ArchiveMaxConsumers + 1 {
		req := fmt.Sprintf(`{"stream_name":%q,"config":{"durable_name":"pile%d","ack_policy":"none"}}`, central.ArchiveStreamName, i)
		m, err := au.nc.Request(api(fmt.Sprintf("CONSUMER.CREATE.%s.pile%d", central.ArchiveStreamName, i)), []byte(req), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		refused := strings.Contains(string(m.Data), `"error"`)
		if i < central.ArchiveMaxConsumers && refused {
			t.Fatalf("consumer %d refused before the limit: %s", i, m.Data)
		}
		if i == central.ArchiveMaxConsumers && !refused {
			t.Fatalf("consumer %d created past the archive's limit of %d: %s", i, central.ArchiveMaxConsumers, m.Data)
		}
	}
}
