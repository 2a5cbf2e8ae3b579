package provision_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/ledger"
	hoaudit "github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/hub"
	"github.com/rxedge/agent/testkit/ledgertest"
)

var witness = identity{"witness", "CHANGE-ME-witness", "_INBOX_witness"}

// witnessKey makes a witness key pair.
func witnessKey(t *testing.T) (note.Signer, string) {
	t.Helper()
	skey, vkey, err := hoaudit.GenerateWitnessKey(rand.Reader, "")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return signer, vkey
}

// witnessMsgs is how many countersigned checkpoints the witness stream
// holds, read as the administrator.
func witnessMsgs(t *testing.T, ad *client) uint64 {
	t.Helper()
	s, err := ad.js.Stream(testContext(t), central.WitnessStreamName)
	if err != nil {
		t.Fatalf("witness stream info as admin: %v", err)
	}
	return s.CachedInfo().State.Msgs
}

// TestProductionConfigWitness runs head office's witness under each
// layout as the production configuration's witness user: it reads the
// archives and countersigns a store's checkpoints into RX_WITNESS, which
// hq provision created, and the auditor, with its own grants, verifies
// them with the witness key and proves a movement with a countersigned
// checkpoint. Then what the stores, the auditor, the operator and the
// witness itself must not do with RX_WITNESS, and what the witness must
// not do elsewhere.
func TestProductionConfigWitness(t *testing.T) {
	for _, n := range layouts {
		t.Run(fmt.Sprintf("partitions=%d", n), func(t *testing.T) { testWitness(t, n) })
	}
}

func testWitness(t *testing.T, n int) {
	h := startProduction(t, n)
	a := dial(t, h.URL(), storeA)
	au := dial(t, h.URL(), audit)
	wi := dial(t, h.URL(), witness)
	ad := dial(t, h.URL(), admin)
	o := dial(t, h.URL(), ops)
	ctx := testContext(t)

	s := ledgertest.NewStore(t, "S0001")
	s.Movements(ctx, t, a.js, 7)
	s.Checkpoint(ctx, t, a.js)
	s.Movements(ctx, t, a.js, 5)
	s.Checkpoint(ctx, t, a.js)
	ledgertest.WaitArchived(ctx, t, ad.js, archive("S0001", n), 14)
	roster, err := provision.ParseRoster(strings.NewReader(s.RosterLine()))
	if err != nil {
		t.Fatal(err)
	}
	signer, vkey := witnessKey(t)
	wv, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("countersigns as the witness user", func(t *testing.T) {
		w, err := hoaudit.NewWitness(ctx, hoaudit.WitnessOptions{Conn: wi.nc, APIPrefix: central.WitnessAPIPrefix, Archives: central.ArchiveStreams(n),
			Roster: roster, Signer: signer, StateFile: filepath.Join(t.TempDir(), "witness.state")})
		if err != nil {
			t.Fatalf("the witness starts: %v", err)
		}
		run, err := w.Once(ctx)
		if err != nil || run.Read != 2 || run.Countersigned != 2 || len(run.Refused) != 0 {
			t.Fatalf("the witness's pass: %+v, %v", run, err)
		}
		if got := witnessMsgs(t, ad); got != 2 {
			t.Fatalf("RX_WITNESS holds %d countersigned checkpoints, want 2", got)
		}
	})

	t.Run("the auditor verifies the countersignatures", func(t *testing.T) {
		seed, pub := ledgertest.Operator(t)
		s.Respond(t, a.nc, pub)
		cs, err := command.NewSigner(seed)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := hoaudit.Verify(ctx, hoaudit.Options{Conn: au.nc, APIPrefix: central.AuditAPIPrefix, Archives: central.ArchiveStreams(n),
			Stores: []string{"S0001"}, Roster: roster, Witness: wv, Timeout: 5 * time.Second, Asker: fleet.NewClient(au.nc, cs)})
		if err != nil {
			t.Fatalf("verify as the auditor: %v", err)
		}
		if !rep.OK() || len(rep.Logs) != 1 || rep.Logs[0].Witnessed != 12 || rep.Logs[0].Matched != 12 || len(rep.Notes) != 0 {
			t.Fatalf("verify as the auditor with the witness key: %+v %+v", rep, rep.Logs)
		}
		p, err := hoaudit.Prove(ctx, hoaudit.ProveOptions{Conn: au.nc, APIPrefix: central.AuditAPIPrefix, Archives: central.ArchiveStreams(n),
			Key: ledgertest.Key("S0001", 3), Store: "S0001", Roster: roster})
		if err != nil {
			t.Fatalf("prove as the auditor: %v", err)
		}
		if res, err := ledger.CheckProof(p, s.VKey, vkey); err != nil || !res.Witnessed || res.Leaf.Seq != 4 {
			t.Fatalf("the auditor's proof with the countersignature: %+v %v", res, err)
		}
	})

	arch := archive("S0001", n)
	mv := stream("S0001", n)
	const ws = central.WitnessStreamName
	request := func(c *client, subject, body string) func(t *testing.T) error {
		return func(t *testing.T) error {
			_, err := c.nc.RequestWithContext(shortContext(t), subject, []byte(body))
			return err
		}
	}
	publishTo := func(c *client, subject string) func(t *testing.T) error {
		return func(t *testing.T) error { return c.nc.Publish(subject, []byte(`{"note":"forged"}`)) }
	}
	wapi := func(r string) string { return central.WitnessAPIPrefix + r }
	denied := []struct {
		who           string
		c             *client
		name, subject string
		do            func(t *testing.T) error
	}{
		// No one but the witness publishes countersignatures or touches
		// the witness stream.
		{who: "store", c: a, name: "publish a countersignature", subject: "rx.witness.S0001"},
		{who: "store", c: a, name: "publish another store's countersignature", subject: "rx.witness.S0002"},
		{who: "store", c: a, name: "read the witness stream", subject: "$JS.API.STREAM.INFO." + ws, do: request(a, "$JS.API.STREAM.INFO."+ws, "")},
		{who: "store", c: a, name: "consume the witness stream", subject: "$JS.API.CONSUMER.CREATE." + ws + ".c", do: request(a, "$JS.API.CONSUMER.CREATE."+ws+".c", "{}")},
		{who: "store", c: a, name: "delete the witness stream", subject: "$JS.API.STREAM.DELETE." + ws, do: request(a, "$JS.API.STREAM.DELETE."+ws, "")},
		{who: "store", c: a, name: "purge the witness stream", subject: "$JS.API.STREAM.PURGE." + ws, do: request(a, "$JS.API.STREAM.PURGE."+ws, "")},
		{who: "auditor", c: au, name: "publish a countersignature", subject: "rx.witness.S0001"},
		{who: "auditor", c: au, name: "delete the witness stream", subject: "$JS.API.STREAM.DELETE." + ws, do: request(au, "$JS.API.STREAM.DELETE."+ws, "")},
		{who: "auditor", c: au, name: "delete the witness stream under its prefix", subject: api("STREAM.DELETE." + ws), do: request(au, api("STREAM.DELETE."+ws), "")},
		{who: "auditor", c: au, name: "purge the witness stream under its prefix", subject: api("STREAM.PURGE." + ws), do: request(au, api("STREAM.PURGE."+ws), "")},
		{who: "auditor", c: au, name: "delete a countersignature", subject: api("STREAM.MSG.DELETE." + ws), do: request(au, api("STREAM.MSG.DELETE."+ws), `{"seq":1}`)},
		{who: "auditor", c: au, name: "change the witness stream", subject: api("STREAM.UPDATE." + ws), do: request(au, api("STREAM.UPDATE."+ws), "{}")},
		{who: "operator", c: o, name: "publish a countersignature", subject: "rx.witness.S0001"},
		{who: "operator", c: o, name: "read the witness stream", subject: "$JS.API.STREAM.INFO." + ws, do: request(o, "$JS.API.STREAM.INFO."+ws, "")},
		{who: "operator", c: o, name: "delete the witness stream", subject: "$JS.API.STREAM.DELETE." + ws, do: request(o, "$JS.API.STREAM.DELETE."+ws, "")},
		{who: "operator", c: o, name: "purge the witness stream", subject: "$JS.API.STREAM.PURGE." + ws, do: request(o, "$JS.API.STREAM.PURGE."+ws, "")},
		{who: "admin", c: ad, name: "publish a countersignature", subject: "rx.witness.S0001"},
		{who: "admin", c: ad, name: "delete the witness stream", subject: "$JS.API.STREAM.DELETE." + ws, do: request(ad, "$JS.API.STREAM.DELETE."+ws, "")},
		{who: "admin", c: ad, name: "purge the witness stream", subject: "$JS.API.STREAM.PURGE." + ws, do: request(ad, "$JS.API.STREAM.PURGE."+ws, "")},
		// The witness does nothing but read the archives and countersign.
		{who: "witness", c: wi, name: "publish a movement", subject: "rx.mv.S0001.forged"},
		{who: "witness", c: wi, name: "publish to a partition", subject: "rx.mvp.1.S0001.forged"},
		{who: "witness", c: wi, name: "publish a checkpoint", subject: central.Subject("S0001", ledger.CheckpointToken("00000000000000aa", 99))},
		{who: "witness", c: wi, name: "publish to the archive", subject: "rx.ar.S0001"},
		{who: "witness", c: wi, name: "send a store command", subject: "rx.ctl.S0001.dlq.redrive"},
		{who: "witness", c: wi, name: "send the ledger command", subject: command.Subject("S0001", command.CmdLedger)},
		{who: "witness", c: wi, name: "send the reconcile command", subject: command.Subject("S0001", "reconcile")},
		{who: "witness", c: wi, name: "create a stream", subject: "$JS.API.STREAM.CREATE.RX_COPY", do: request(wi, "$JS.API.STREAM.CREATE.RX_COPY", `{"name":"RX_COPY","subjects":["rx.mv.>"]}`)},
		{who: "witness", c: wi, name: "create the witness stream under its prefix", subject: wapi("STREAM.CREATE." + ws), do: request(wi, wapi("STREAM.CREATE."+ws), "{}")},
		{who: "witness", c: wi, name: "change the witness stream", subject: wapi("STREAM.UPDATE." + ws), do: request(wi, wapi("STREAM.UPDATE."+ws), "{}")},
		{who: "witness", c: wi, name: "delete the witness stream", subject: wapi("STREAM.DELETE." + ws), do: request(wi, wapi("STREAM.DELETE."+ws), "")},
		{who: "witness", c: wi, name: "purge the witness stream", subject: wapi("STREAM.PURGE." + ws), do: request(wi, wapi("STREAM.PURGE."+ws), "")},
		{who: "witness", c: wi, name: "delete the archive", subject: wapi("STREAM.DELETE." + arch), do: request(wi, wapi("STREAM.DELETE."+arch), "")},
		{who: "witness", c: wi, name: "delete a movement stream", subject: "$JS.API.STREAM.DELETE." + mv, do: request(wi, "$JS.API.STREAM.DELETE."+mv, "")},
		{who: "witness", c: wi, name: "use the whole API under its prefix", subject: wapi("STREAM.NAMES"), do: request(wi, wapi("STREAM.NAMES"), "")},
		{who: "witness", c: wi, name: "read the fleet view", subject: wapi("DIRECT.GET." + central.FleetStreamName), do: request(wi, wapi("DIRECT.GET."+central.FleetStreamName), "")},
	}
	for _, tc := range denied {
		t.Run(tc.who+" cannot "+tc.name, func(t *testing.T) {
			do := tc.do
			if do == nil {
				do = publishTo(tc.c, tc.subject)
			}
			err := do(t)
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("caller's error = %v, want nil or a timeout", err)
			}
			tc.c.wantViolation(t, `Publish to "`+tc.subject+`"`)
		})
	}

	t.Run("the auditor's answers are not stored as countersignatures", func(t *testing.T) {
		// JetStream answers onto the reply subject the requester names.
		// From AUDIT the answer comes back into AUDIT, which cannot
		// publish to the witness subjects.
		before := witnessMsgs(t, ad)
		for _, subject := range []string{api("STREAM.INFO." + ws), api("STREAM.INFO." + arch)} {
			m := nats.NewMsg(subject)
			m.Reply = central.WitnessSubject("S0001")
			if err := au.nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
		if err := au.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		// Nothing signals that no answer was stored: look for a second.
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if got := witnessMsgs(t, ad); got != before {
				t.Fatalf("RX_WITNESS holds %d messages, had %d: an answer to the auditor was stored", got, before)
			}
		}
	})

	t.Run("a push consumer aimed at a witness or movement subject stores nothing", func(t *testing.T) {
		// The grants to create consumers cannot restrict a consumer's
		// deliver subject, which is in RX. The auditor's consumer on an
		// archive or on RX_WITNESS delivering onto a witness subject, and
		// the witness's onto a movement subject, deliver nothing there
		// (nats-server does not count a stream's own subscription as
		// interest), as TestProductionConfigAudit pins for the auditor
		// and movement subjects.
		before := witnessMsgs(t, ad)
		target := central.PartitionSubject(central.Partition("S0002", n), n, "S0002", "bywitness")
		for i, c := range []struct {
			c                       *client
			prefix, stream, deliver string
			// cycle: the server refuses a consumer delivering onto its
			// own stream's subjects.
			cycle bool
		}{
			{c: au, prefix: central.AuditAPIPrefix, stream: arch, deliver: central.WitnessSubject("S0001")},
			{c: au, prefix: central.AuditAPIPrefix, stream: ws, deliver: central.WitnessSubject("S0002"), cycle: true},
			{c: au, prefix: central.AuditAPIPrefix, stream: ws, deliver: target},
			{c: wi, prefix: central.WitnessAPIPrefix, stream: arch, deliver: target},
		} {
			name := fmt.Sprintf("push%d", i)
			req := `{"stream_name":"` + c.stream + `","config":{"name":"` + name + `","deliver_subject":"` + c.deliver + `","ack_policy":"none","deliver_policy":"all"}}`
			m, err := c.c.nc.Request(c.prefix+"CONSUMER.CREATE."+c.stream+"."+name, []byte(req), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			refused := strings.Contains(string(m.Data), `"error"`)
			if refused != c.cycle || c.cycle && !strings.Contains(string(m.Data), "cycle") {
				t.Fatalf("create a push consumer on %s delivering to %s: %s", c.stream, c.deliver, m.Data)
			}
		}
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if got := witnessMsgs(t, ad); got != before {
				t.Fatalf("RX_WITNESS holds %d messages, had %d: a push consumer delivered into it", got, before)
			}
		}
		b := dial(t, h.URL(), storeB)
		m, err := directGet(testContext(t), b.nc, central.Subject("S0002", "bywitness"))
		if err != nil || m.Header.Get("Status") != "404" {
			t.Errorf("store B reads its key bywitness: %v, status %q; want 404", err, m.Header.Get("Status"))
		}
	})

	t.Run("an answer stored from the central account is no countersignature", func(t *testing.T) {
		// In RX, the account of the streams, a JetStream answer goes to
		// whatever reply subject the requester named, and the server does
		// not check a reply subject against permissions: the operator's
		// direct get of the fleet view, named with a witness subject as
		// its reply, has its answer stored in RX_WITNESS. What is stored
		// there is not signed by the witness key, and verify names it.
		before := witnessMsgs(t, ad)
		m := nats.NewMsg("$JS.API.DIRECT.GET." + central.FleetStreamName + "." + central.FleetSubject("S0001"))
		m.Reply = central.WitnessSubject("S0001")
		if err := o.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for witnessMsgs(t, ad) == before {
			if time.Now().After(deadline) {
				t.Fatal("the operator's answer was not stored in 10 s: if nats-server now checks reply subjects, assert that here instead")
			}
			time.Sleep(20 * time.Millisecond) // polled: awaiting the stored answer
		}
		rep, err := hoaudit.Verify(testContext(t), hoaudit.Options{Conn: au.nc, APIPrefix: central.AuditAPIPrefix, Archives: central.ArchiveStreams(n),
			Stores: []string{"S0001"}, Roster: roster, Witness: wv})
		if err != nil {
			t.Fatalf("verify as the auditor: %v", err)
		}
		if rep.OK() || rep.Counts[hoaudit.KindBadSignature] != 1 || len(rep.Logs) != 1 || rep.Logs[0].Witnessed != 12 {
			t.Fatalf("verify after the stored answer: %+v %+v, want one bad_signature and the countersignatures still 12", rep, rep.Logs)
		}
	})

	t.Run("the witness restarts without its state from its countersignatures", func(t *testing.T) {
		// With no state file the witness reads RX_WITNESS, takes its own
		// countersignatures (skipping the operator's stored answer) and
		// reads the archives again from the start: nothing is
		// countersigned twice.
		w, err := hoaudit.NewWitness(testContext(t), hoaudit.WitnessOptions{Conn: wi.nc, APIPrefix: central.WitnessAPIPrefix, Archives: central.ArchiveStreams(n),
			Roster: roster, Signer: signer, StateFile: filepath.Join(t.TempDir(), "witness.state"), Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatalf("the witness starts with no state file: %v", err)
		}
		run, err := w.Once(testContext(t))
		if err != nil || run.Read != 2 || run.Countersigned != 0 || run.Skipped != 2 || len(run.Refused) != 0 {
			t.Fatalf("the pass after the restart: %+v, %v", run, err)
		}
		if got := fmt.Sprint(w.Witnessed()); got != "[S0001/"+s.Log+" 12]" {
			t.Errorf("witnessed %s, want S0001 at 12", got)
		}
	})

	t.Run("the streams are intact", func(t *testing.T) {
		if got := witnessMsgs(t, ad); got != 3 {
			t.Errorf("RX_WITNESS holds %d messages, want the 2 countersignatures and the operator's stored answer", got)
		}
		s, err := ad.js.Stream(testContext(t), arch)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().State.Msgs; got != 14 {
			t.Errorf("%s holds %d messages, want 14", arch, got)
		}
	})
}

// TestProductionConfigWitnessNeedsProvision: on a central where agent
// provision has not created RX_WITNESS, the witness user's attempt to
// create it is denied, and the witness says to run hq provision.
func TestProductionConfigWitnessNeedsProvision(t *testing.T) {
	h := startBareHub(t, hub.Options{ConfigFile: productionConfig})
	wi := dial(t, h.URL(), witness)
	signer, _ := witnessKey(t)
	roster, err := provision.ParseRoster(strings.NewReader("S0001\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = hoaudit.NewWitness(testContext(t), hoaudit.WitnessOptions{Conn: wi.nc, APIPrefix: central.WitnessAPIPrefix, Archives: central.ArchiveStreams(1),
		Roster: roster, Signer: signer, StateFile: filepath.Join(t.TempDir(), "witness.state"), CreateTimeout: time.Second,
		Log: slog.New(slog.DiscardHandler)})
	if err == nil || !strings.Contains(err.Error(), "run hq provision") {
		t.Fatalf("the witness on an unprovisioned central: %v, want an error that says to run hq provision", err)
	}
	wi.wantViolation(t, `Publish to "`+central.WitnessAPIPrefix+"STREAM.CREATE."+central.WitnessStreamName+`"`)
	ad := dial(t, h.URL(), admin)
	if _, err := ad.js.Stream(testContext(t), central.WitnessStreamName); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("the witness stream after the denied create: %v, want not found", err)
	}
}
