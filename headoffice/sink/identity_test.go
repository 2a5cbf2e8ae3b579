package sink

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// TestStoreIdentityCannotReadArchive runs the production configuration:
// the audit user's sink writes a store's movement, while the same sink
// connected as a store's identity reads nothing of the archive, whatever
// API prefix it tries, and the server reports each attempt as a
// permissions violation.
func TestStoreIdentityCannotReadArchive(t *testing.T) {
	pg := pgtest.Start(t)
	for _, n := range []int{1, 4} {
		t.Run(strings.Repeat("partitioned", min(n-1, 1))+"central", func(t *testing.T) {
			db := newDB(t, pg)
			var b bytes.Buffer
			if err := provision.CentralConfig(&b, []string{"S0001", "S0002"}, n); err != nil {
				t.Fatal(err)
			}
			conf := filepath.Join(t.TempDir(), "central.conf")
			if err := os.WriteFile(conf, b.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
			srv := natstest.StartHub(t, natstest.WithStream(central.StreamOptions{Partitions: n}),
				natstest.WithConfigFile(conf, nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix("_INBOX_admin")))
			violations := make(chan error, 64)
			store := natstest.Connect(t, srv.URL(), nats.UserInfo("S0001", "CHANGE-ME-S0001"), nats.CustomInboxPrefix("_INBOX_S0001"),
				nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
					select {
					case violations <- err:
					default:
					}
				}))
			sjs := natstest.JetStream(t, store)
			m := mv("S0001", 1, payload{Type: "receive", Schedule: "CII"})
			if _, err := sjs.PublishMsg(testContext(t), m.Msg()); err != nil {
				t.Fatalf("store publishes: %v", err)
			}
			audit := natstest.Connect(t, srv.URL(), nats.UserInfo("audit", "CHANGE-ME-audit"), nats.CustomInboxPrefix("_INBOX_audit"))
			ajs, err := jetstream.NewWithAPIPrefix(audit, central.AuditAPIPrefix)
			if err != nil {
				t.Fatal(err)
			}
			waitArchived(t, ajs, central.ArchiveStreams(n), 1)

			// The store's identity, as the sink would use it.
			for _, prefix := range []string{"", central.AuditAPIPrefix} {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := Run(ctx, Options{Conn: store, APIPrefix: prefix, Archives: central.ArchiveStreams(n), Postgres: db.pool(t), UntilCaughtUp: true})
				cancel()
				if err == nil {
					t.Errorf("sink as store S0001 (API prefix %q): no error", prefix)
				}
				js, _ := jetStream(store, prefix)
				// The archive that holds the store's own movements.
				for _, name := range []string{central.ArchiveStream(central.Partition("S0001", n), n)} {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					_, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{})
					cancel()
					if err == nil {
						t.Errorf("store S0001 (API prefix %q) made a consumer on %s", prefix, name)
					}
				}
			}
			if got := db.count(t, `SELECT count(*) FROM movements`); got != 0 {
				t.Fatalf("the store's identity got %d rows into the database", got)
			}
			select {
			case err := <-violations:
				if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
					t.Errorf("store's async error %v, want a permissions violation", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("the server reported no permissions violation for the store's reads")
			}

			// The audit user's sink reads it.
			res, err := Run(testContext(t), Options{Conn: audit, APIPrefix: central.AuditAPIPrefix, Archives: central.ArchiveStreams(n), Postgres: db.pool(t), UntilCaughtUp: true})
			if err != nil {
				t.Fatalf("sink as the audit user: %v", err)
			}
			var rows uint64
			for _, s := range res.Streams {
				rows += s.Rows
			}
			if rows != 1 || db.count(t, `SELECT count(*) FROM movements WHERE store_id = 'S0001'`) != 1 {
				t.Fatalf("sink as the audit user wrote %d rows, want 1", rows)
			}
		})
	}
}
