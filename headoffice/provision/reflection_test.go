package provision_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/hub"
)

// oneAccountConfig is the production template as it was before each store
// had its own account: every identity in the account RX. The reflection
// tests run each attack against it, where it must do harm (this pins the
// server behaviour they rely on), and against the shipped template, where
// it must not.
var oneAccountConfig = filepath.Join("testdata", "production-one-account.conf")

// startTemplate starts a server with config and creates the movement
// streams of n partitions as its administrator.
func startTemplate(t *testing.T, config string, n int) *hub.Hub {
	t.Helper()
	h := startBareHub(t, hub.Options{ConfigFile: config})
	adm := dial(t, h.URL(), admin)
	for p := range n {
		if _, err := adm.js.CreateStream(shortContext(t), central.StreamConfig(central.StreamOptions{Partitions: n, Partition: p})); err != nil {
			t.Fatalf("create %s: %v", central.MovementStream(p, n), err)
		}
	}
	return h
}

// TestReflection sends, as store S0001, JetStream requests whose reply
// subject names something of store S0002's or the JetStream API itself:
// the server answers to whatever reply subject the requester names and
// checks only the request's subject against its permissions. With one
// account for every store the answers reach S0002 and the API; with one
// account per store they come back into S0001's own account.
func TestReflection(t *testing.T) {
	templates := []struct {
		name       string
		config     string
		partitions int
		harm       bool
	}{
		{"one account", oneAccountConfig, 1, true},
		{"account per store", productionConfig, 1, false},
		{"account per store, four partitions", partitionedConfig(t, 4), 4, false},
	}
	// Each attack sends its requests as a and reports whether anything
	// reached b (or, for the API, whether a consumer now exists).
	attacks := []struct {
		name    string
		observe []string // what S0002 subscribes to
		reply   string
	}{
		{"onto another store's control subject", []string{"rx.ctl.S0002.>"}, "rx.ctl.S0002.status"},
		{"onto the fleet subject", []string{"rx.ctl.fleet.>"}, "rx.ctl.fleet.status"},
		{"onto another store's inbox", []string{"_INBOX_S0002.>"}, "_INBOX_S0002.x"},
	}
	for _, tpl := range templates {
		t.Run(tpl.name, func(t *testing.T) {
			h := startTemplate(t, tpl.config, tpl.partitions)
			victim := stream("S0002", tpl.partitions)
			a := dial(t, h.URL(), storeA)
			b := dial(t, h.URL(), storeB)
			for i, at := range attacks {
				t.Run(at.name, func(t *testing.T) {
					got := make(chan *nats.Msg, 4)
					for _, s := range at.observe {
						sub, err := b.nc.ChanSubscribe(s, got)
						if err != nil {
							t.Fatal(err)
						}
						defer sub.Unsubscribe()
					}
					b.nc.Flush()
					m := nats.NewMsg(central.Subject("S0001", "reflect"+string(rune('a'+i))))
					m.Reply = at.reply
					m.Data = []byte("{}")
					if err := a.nc.PublishMsg(m); err != nil {
						t.Fatal(err)
					}
					reached := false
					select {
					case r := <-got:
						reached = true
						t.Logf("delivered to %s: %q (reply %q)", r.Subject, r.Data, r.Reply)
					case <-time.After(time.Second):
					}
					if reached != tpl.harm {
						t.Errorf("a publish ack reached S0002 on %s: %v, want %v", at.reply, reached, tpl.harm)
					}
				})
			}
			t.Run("onto another store's movement subject", func(t *testing.T) {
				// A publish ack reflected onto the subject that holds
				// S0002's key (its partition's, with partitions) is stored
				// there as S0002's movement.
				pB := central.Partition("S0002", tpl.partitions)
				held := central.PartitionSubject(pB, tpl.partitions, "S0002", "reflected")
				for i, reply := range []string{held, central.Subject("S0002", "reflected")} {
					m := nats.NewMsg(central.Subject("S0001", fmt.Sprintf("reflectmv%d", i)))
					m.Reply = reply
					m.Data = []byte("{}")
					if err := a.nc.PublishMsg(m); err != nil {
						t.Fatal(err)
					}
				}
				// Nothing signals that no ack was stored: look for a second.
				stored := false
				for end := time.Now().Add(time.Second); !stored && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
					got, err := directGet(shortContext(t), b.nc, central.Subject("S0002", "reflected"))
					if err != nil {
						t.Fatal(err)
					}
					if stored = got.Header.Get("Status") != "404"; stored {
						t.Logf("S0002's key reflected holds %q", got.Data)
					}
				}
				if stored != tpl.harm {
					t.Errorf("a publish ack was stored as S0002's movement: %v, want %v", stored, tpl.harm)
				}
			})
			t.Run("a stored message fed to the JetStream API", func(t *testing.T) {
				// S0002 stores a movement; S0001 stores a consumer request
				// as a movement of its own, and has the direct get of it
				// answered onto the API's consumer-create subject.
				if _, err := b.js.Publish(shortContext(t), central.Subject("S0002", "secret"), []byte(`{"rx_ref":"patient"}`)); err != nil {
					t.Fatal(err)
				}
				req := `{"stream_name":"` + victim + `","config":{"name":"steal","deliver_subject":"_INBOX_S0001.steal","ack_policy":"none","deliver_policy":"all"}}`
				if _, err := a.js.Publish(shortContext(t), central.Subject("S0001", "crafted"), []byte(req)); err != nil {
					t.Fatal(err)
				}
				stolen, err := a.nc.SubscribeSync("_INBOX_S0001.steal")
				if err != nil {
					t.Fatal(err)
				}
				a.nc.Flush()
				dg := nats.NewMsg(central.DirectGetSubject(central.Subject("S0001", "crafted")))
				dg.Reply = "$JS.API.CONSUMER.CREATE." + victim + ".steal"
				if err := a.nc.PublishMsg(dg); err != nil {
					t.Fatal(err)
				}
				read := map[string]bool{}
				for {
					m, err := stolen.NextMsg(time.Second)
					if err != nil {
						break
					}
					read[m.Subject] = true
				}
				if got := read[central.PartitionSubject(central.Partition("S0002", tpl.partitions), tpl.partitions, "S0002", "secret")]; got != tpl.harm {
					t.Errorf("S0001 read S0002's movement through a consumer it had the server create: %v, want %v", got, tpl.harm)
				}
				info, err := dial(t, h.URL(), admin).js.Stream(shortContext(t), victim)
				if err != nil {
					t.Fatal(err)
				}
				if n := info.CachedInfo().State.Consumers; (n > 0) != tpl.harm {
					t.Errorf("%d consumers on %s after the attack, want harm %v", n, victim, tpl.harm)
				}
			})
		})
	}
}
