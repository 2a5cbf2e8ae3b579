package provision_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
)

var audit = identity{"audit", "CHANGE-ME-audit", "_INBOX_audit"}

// api is the auditor's name for a JetStream API request.
func api(request string) string { return central.AuditAPIPrefix + request }

// TestProductionConfigAudit checks, under each layout, that the audit
// user reads a store's movements from its archive with an ordered consumer,
// reads the fleet view and sends the reconcile command, all from its own
// account; and that it cannot publish a movement, send any other command,
// delete, purge, create or change a stream, read a movement stream, or
// have an answer of JetStream's stored as a movement.
func TestProductionConfigAudit(t *testing.T) {
	for _, n := range layouts {
		t.Run(fmt.Sprintf("partitions=%d", n), func(t *testing.T) { testAudit(t, n) })
	}
}

func testAudit(t *testing.T, n int) {
	h := startProduction(t, n)
	a := dial(t, h.URL(), storeA)
	au := dial(t, h.URL(), audit)
	ajs, err := jetstream.NewWithAPIPrefix(au.nc, central.AuditAPIPrefix)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := publish(testContext(t), a.js, "S0001", fmt.Sprintf("k%d", i), []byte(`{}`)); err != nil {
			t.Fatalf("store A publishes: %v", err)
		}
	}
	if _, err := a.js.Publish(testContext(t), central.FleetSubject("S0001"), []byte(`{"store":"S0001"}`)); err != nil {
		t.Fatalf("store A publishes its fleet summary: %v", err)
	}
	arch := archive("S0001", n)

	t.Run("reads the archive with an ordered consumer", func(t *testing.T) {
		s, err := ajs.Stream(testContext(t), arch)
		if err != nil {
			t.Fatalf("archive info: %v", err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for info := s.CachedInfo(); info.State.Msgs < 3; {
			if time.Now().After(deadline) {
				t.Fatalf("%s holds %d messages after 20 s, want 3 (awaited: the source copying them)", arch, info.State.Msgs)
			}
			time.Sleep(20 * time.Millisecond)
			if info, err = s.Info(testContext(t)); err != nil {
				t.Fatal(err)
			}
		}
		c, err := ajs.OrderedConsumer(testContext(t), arch, jetstream.OrderedConsumerConfig{FilterSubjects: []string{central.ArchiveSubject("S0001")}})
		if err != nil {
			t.Fatalf("ordered consumer: %v", err)
		}
		batch, err := c.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var digests []string
		for m := range batch.Messages() {
			if m.Subject() != central.ArchiveSubject("S0001") {
				t.Errorf("archived subject %q, want %q", m.Subject(), central.ArchiveSubject("S0001"))
			}
			digests = append(digests, m.Headers().Get(central.HeaderDigest))
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(digests) != "[digest-of-k0 digest-of-k1 digest-of-k2]" {
			t.Errorf("archived digests %q, want those of k0, k1, k2", digests)
		}
	})

	t.Run("reads the fleet view", func(t *testing.T) {
		m, err := au.nc.Request(api("DIRECT.GET."+central.FleetStreamName+"."+central.FleetSubject("S0001")), nil, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if st := m.Header.Get("Status"); st != "" || string(m.Data) != `{"store":"S0001"}` {
			t.Errorf("fleet entry: status %q data %q", st, m.Data)
		}
	})

	t.Run("sends the reconcile command", func(t *testing.T) {
		sub, err := a.nc.SubscribeSync(command.Subject("S0001", ">"))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := au.nc.Publish(command.Subject("S0001", "reconcile"), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("store A waiting for the command: %v", err)
		}
		if m.Subject != "rx.ctl.S0001.reconcile" {
			t.Errorf("command subject %q", m.Subject)
		}
	})

	request := func(subject, body string) func(t *testing.T) error {
		return func(t *testing.T) error {
			_, err := au.nc.RequestWithContext(shortContext(t), subject, []byte(body))
			return err
		}
	}
	publishTo := func(subject string) func(t *testing.T) error {
		return func(t *testing.T) error { return au.nc.Publish(subject, []byte(`{}`)) }
	}
	subscribeTo := func(subject string) func(t *testing.T) error {
		return func(t *testing.T) error {
			_, err := au.nc.SubscribeSync(subject)
			return err
		}
	}
	mv := stream("S0001", n)
	denied := []struct {
		name, subject string
		do            func(t *testing.T) error
		sub           bool
	}{
		{name: "publish a movement", subject: "rx.mv.S0001.forged", do: publishTo("rx.mv.S0001.forged")},
		{name: "publish to a partition", subject: "rx.mvp.1.S0001.forged", do: publishTo("rx.mvp.1.S0001.forged")},
		{name: "publish to the archive", subject: "rx.ar.S0001", do: publishTo("rx.ar.S0001")},
		{name: "send another command", subject: "rx.ctl.S0001.dlq.redrive", do: publishTo("rx.ctl.S0001.dlq.redrive")},
		{name: "delete the archive", subject: "$JS.API.STREAM.DELETE." + arch, do: request("$JS.API.STREAM.DELETE."+arch, "")},
		{name: "delete the archive under its prefix", subject: api("STREAM.DELETE." + arch), do: request(api("STREAM.DELETE."+arch), "")},
		{name: "use the whole API under its prefix", subject: api("STREAM.NAMES"), do: request(api("STREAM.NAMES"), "")},
		{name: "purge the archive", subject: "$JS.API.STREAM.PURGE." + arch, do: request("$JS.API.STREAM.PURGE."+arch, "")},
		{name: "delete an archived message", subject: "$JS.API.STREAM.MSG.DELETE." + arch, do: request("$JS.API.STREAM.MSG.DELETE."+arch, `{"seq":1}`)},
		{name: "update the archive", subject: "$JS.API.STREAM.UPDATE." + arch, do: request("$JS.API.STREAM.UPDATE."+arch, "{}")},
		{name: "create a stream", subject: "$JS.API.STREAM.CREATE.RX_COPY", do: request("$JS.API.STREAM.CREATE.RX_COPY", `{"name":"RX_COPY","subjects":["rx.mv.>"]}`)},
		{name: "delete a movement stream", subject: "$JS.API.STREAM.DELETE." + mv, do: request("$JS.API.STREAM.DELETE."+mv, "")},
		{name: "read a movement stream's info", subject: "$JS.API.STREAM.INFO." + mv, do: request("$JS.API.STREAM.INFO."+mv, "")},
		{name: "consume a movement stream", subject: "$JS.API.CONSUMER.CREATE." + mv + ".c", do: request("$JS.API.CONSUMER.CREATE."+mv+".c", "{}")},
		{name: "direct-get a movement", subject: "$JS.API.DIRECT.GET." + mv + ".rx.mv.S0001.k0", do: request("$JS.API.DIRECT.GET."+mv+".rx.mv.S0001.k0", "")},
		{name: "subscribe to heartbeats", subject: "rx.status.>", do: subscribeTo("rx.status.>"), sub: true},
		{name: "subscribe to the operator's inbox", subject: "_INBOX_ops.>", do: subscribeTo("_INBOX_ops.>"), sub: true},
	}
	for _, tc := range denied {
		t.Run("cannot "+tc.name, func(t *testing.T) {
			err := tc.do(t)
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("caller's error = %v, want nil or a timeout", err)
			}
			what := `Publish to "` + tc.subject + `"`
			if tc.sub {
				what = `Subscription to "` + tc.subject + `"`
			}
			au.wantViolation(t, what)
		})
	}

	t.Run("a push consumer aimed at a movement subject stores nothing", func(t *testing.T) {
		// The grant to create consumers cannot restrict a consumer's
		// deliver subject, which is in the account RX. nats-server does
		// not count a stream's own subscription as delivery interest, so a
		// consumer delivering onto another store's movement subject
		// delivers nothing there. This pins that.
		target := central.PartitionSubject(central.Partition("S0002", n), n, "S0002", "forged")
		req := `{"stream_name":"` + arch + `","config":{"name":"push","deliver_subject":"` + target + `","ack_policy":"none","deliver_policy":"all"}}`
		if _, err := au.nc.Request(api("CONSUMER.CREATE."+arch+".push"), []byte(req), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			m, err := au.nc.Request(api("CONSUMER.INFO."+arch+".push"), nil, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var info jetstream.ConsumerInfo
			if err := json.Unmarshal(m.Data, &info); err != nil {
				t.Fatal(err)
			}
			if info.Name != "push" {
				t.Fatalf("consumer info: %s", m.Data)
			}
			if info.Delivered.Stream != 0 {
				t.Fatalf("the push consumer delivered %d messages onto %s", info.Delivered.Stream, target)
			}
		}
		b := dial(t, h.URL(), storeB)
		m, err := directGet(testContext(t), b.nc, central.Subject("S0002", "forged"))
		if err != nil || m.Header.Get("Status") != "404" {
			t.Errorf("store B reads its key forged: %v, status %q; want 404", err, m.Header.Get("Status"))
		}
	})

	t.Run("its answers cannot be stored as a movement", func(t *testing.T) {
		// In the account RX a reply subject the auditor named would take
		// JetStream's answer onto S0002's movement subject, where the
		// stream would store it; from AUDIT the answer comes back into
		// AUDIT.
		held := central.PartitionSubject(central.Partition("S0002", n), n, "S0002", "byaudit")
		for _, reply := range []string{held, central.Subject("S0002", "byaudit")} {
			m := nats.NewMsg(api("STREAM.INFO." + arch))
			m.Reply = reply
			if err := au.nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
		b := dial(t, h.URL(), storeB)
		// Nothing signals that no answer was stored: look for a second.
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			got, err := directGet(testContext(t), b.nc, central.Subject("S0002", "byaudit"))
			if err != nil {
				t.Fatal(err)
			}
			if got.Header.Get("Status") != "404" {
				t.Fatalf("S0002's key byaudit holds %q", got.Data)
			}
		}
	})

	t.Run("the streams are intact", func(t *testing.T) {
		ad := dial(t, h.URL(), admin)
		for name, want := range map[string]uint64{mv: 3, arch: 3} {
			s, err := ad.js.Stream(testContext(t), name)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.CachedInfo().State.Msgs; got != want {
				t.Errorf("%s holds %d messages, want %d", name, got, want)
			}
		}
	})
}
