package lineage_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/lineage"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/natstest"
)

const store = "S0042"

func prepared(t *testing.T, id string) movement.Prepared {
	t.Helper()
	p, es := movement.Prepare([]byte(fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`, id)), store, time.Now())
	if es != nil {
		t.Fatal(es)
	}
	return p
}

// publishMovement stores p on central as the agent sends it, under
// sequence seq of file.
func publishMovement(t *testing.T, js jetstream.JetStream, p movement.Prepared, seq uint64, file string) {
	t.Helper()
	m := central.Message{Store: store, Key: p.KeyString(), Digest: hex.EncodeToString(p.Digest[:]), Seq: seq, EnqueuedAt: time.Now(),
		Payload: p.Payload, File: central.FileLineage{ID: file}}.Msg()
	if _, err := js.PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}
}

// TestCheckerContinuesAfterCentral: a new file that accepted movements
// before it was connected waits for a connection, reads central's record
// (the last stored movement and the store's fleet summary, the higher
// wins) and gives its movements the sequences after it.
func TestCheckerContinuesAfterCentral(t *testing.T) {
	srv := natstest.StartHub(t)
	nc := natstest.Connect(t, srv.URL())
	js := natstest.JetStream(t, nc)
	ctx := t.Context()
	// The old file's last stored movement (sequence 10) and its summary
	// (it gave 12).
	old := uuid.NewString()
	publishMovement(t, js, prepared(t, "old-10"), 10, old)
	sum, _ := json.Marshal(command.Summary{StoreID: store, HighestSeq: 12, FileID: old})
	if _, err := js.Publish(ctx, central.FleetSubject(store), sum); err != nil {
		t.Fatal(err)
	}

	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: store, Lineage: true})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Enqueue([]movement.Prepared{prepared(t, "a"), prepared(t, "b")}); err != nil {
		t.Fatal(err)
	}
	c := lineage.New(lineage.Options{Queue: q, Store: store, Timeout: 2 * time.Second})
	done := make(chan struct{})
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() { c.Run(rctx); close(done) }()
	// Not connected yet: nothing is confirmed, nothing can be leased.
	if c.Done() {
		t.Fatal("confirmed with no connection")
	}
	conn, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c.OnConnect(conn)
	<-done
	if !c.Done() {
		t.Fatalf("the checker stopped without confirming: %s", c.LastError())
	}
	l := q.Lineage()
	if l.Origin != queue.OriginReplaced || l.Prev != old || l.Base != 12 || !l.Confirmed() {
		t.Fatalf("lineage %+v", l)
	}
	rs, err := q.Lease(time.Now(), 10)
	if err != nil || len(rs) != 2 || rs[0].Seq != 13 || rs[1].Seq != 14 {
		t.Fatalf("leased %v, %v; want sequences 13 and 14", rs, err)
	}
}

// checkOnce runs a checker of q, connected to url, until it returns (done
// or held), within 30 s.
func checkOnce(t *testing.T, q *queue.Queue, url, vkey string) *lineage.Checker {
	t.Helper()
	c := lineage.New(lineage.Options{Queue: q, Store: store, Timeout: 2 * time.Second, PublicKey: func() string { return vkey }})
	c.OnConnect(natstest.Connect(t, url))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("the check did not end within 30 s: %s", c.LastError())
	}
	return c
}

// openLineage opens a data file of store that checks its lineage, in dir.
func openLineage(t *testing.T, dir string) *queue.Queue {
	t.Helper()
	q, err := queue.Open(queue.Options{Path: filepath.Join(dir, "agent.db"), StoreID: store, Lineage: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// putSummary writes the store's fleet summary as its agent does.
func putSummary(t *testing.T, js jetstream.JetStream, highest uint64, file string) {
	t.Helper()
	b, _ := json.Marshal(command.Summary{StoreID: store, HighestSeq: highest, FileID: file})
	if _, err := js.Publish(t.Context(), central.FleetSubject(store), b); err != nil {
		t.Fatal(err)
	}
}

// TestCheckerForgedSequence: the last message on the store's subjects is
// a well-formed movement whose Rx-Seq someone with publish rights made
// huge. It neither overflows the file's sequences nor moves them:
// above queue.MaxSeq it is out of range, and far ahead of the store's own
// summary it is implausible; the replaced PC's file continues after the
// summary, and the status says what was skipped.
func TestCheckerForgedSequence(t *testing.T) {
	for _, tc := range []struct {
		seq  uint64
		skip string
	}{
		{1<<64 - 1, lineage.SkipSeqRange},
		{1 << 40, lineage.SkipImplausible},
	} {
		t.Run(fmt.Sprint(tc.seq), func(t *testing.T) {
			srv := natstest.StartHub(t)
			js := natstest.JetStream(t, natstest.Connect(t, srv.URL()))
			old := uuid.NewString()
			publishMovement(t, js, prepared(t, "old-300"), 300, old)
			putSummary(t, js, 300, old)
			publishMovement(t, js, prepared(t, "forged"), tc.seq, uuid.NewString())

			q := openLineage(t, t.TempDir())
			if _, err := q.Enqueue([]movement.Prepared{prepared(t, "a"), prepared(t, "b")}); err != nil {
				t.Fatal(err)
			}
			c := checkOnce(t, q, srv.URL(), "")
			if l := q.Lineage(); !c.Done() || l.Origin != queue.OriginReplaced || l.Prev != old || l.Base != 300 {
				t.Fatalf("done %v, lineage %+v: want replaced after %s at 300", c.Done(), l, old)
			}
			rs, err := q.Lease(time.Now(), 10)
			if err != nil || len(rs) != 2 || rs[0].Seq != 301 || rs[1].Seq != 302 {
				t.Fatalf("leased %v, %v; want sequences 301 and 302", rs, err)
			}
			if st := c.Status(); st.State != status.LineageDone || st.From != lineage.FromSummary || st.Skipped != 1 || st.SkippedRecords[0].Reason != tc.skip {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

// TestCheckerForeignFile: a data file this one does not know gives the
// store's newest sequence. Named only by the last movement, which anyone
// with publish rights on the store's subjects can write, it is reported
// (status, journal) and delivery goes on; named by the store's own
// summary, or by a checkpoint signed with the store's key (a cloned PC
// carries the key), the file is held for an operator, as before.
func TestCheckerForeignFile(t *testing.T) {
	signer, vkey := storeKey(t, store)
	for _, tc := range []struct {
		name string
		held bool
		// forge puts the other file's record on central, given this file.
		forge func(t *testing.T, js jetstream.JetStream, own, other string)
	}{
		{"last movement only", false, func(t *testing.T, js jetstream.JetStream, own, other string) {
			putSummary(t, js, 4, own)
			publishMovement(t, js, prepared(t, "clone-5"), 5, other)
		}},
		{"summary", true, func(t *testing.T, js jetstream.JetStream, own, other string) {
			publishMovement(t, js, prepared(t, "clone-5"), 5, other)
			putSummary(t, js, 5, other)
		}},
		{"checkpoint signed with the store's key", true, func(t *testing.T, js jetstream.JetStream, own, other string) {
			putSummary(t, js, 4, own)
			if _, err := js.PublishMsg(t.Context(), checkpointMsg(t, signer, store, "fedcba9876543210", 5, 1, 5, other)); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := natstest.StartHub(t)
			js := natstest.JetStream(t, natstest.Connect(t, srv.URL()))
			dir := t.TempDir()
			q := openLineage(t, dir)
			if _, err := q.Confirm(queue.CentralRecord{}); err != nil {
				t.Fatal(err)
			}
			var first []movement.Prepared
			for i := range 5 {
				first = append(first, prepared(t, fmt.Sprint("a", i)))
			}
			if _, err := q.Enqueue(first); err != nil {
				t.Fatal(err)
			}
			q.Close()
			q = openLineage(t, dir) // fence at 6: not behind a record of 5
			if _, err := q.Enqueue([]movement.Prepared{prepared(t, "b")}); err != nil {
				t.Fatal(err)
			}
			own, other := q.Lineage().FileID, uuid.NewString()
			tc.forge(t, js, own, other)

			c := checkOnce(t, q, srv.URL(), vkey)
			st := c.Status()
			leased, _ := q.Lease(time.Now(), 10)
			if tc.held { // the five sent before this start, not the one held back
				if c.Done() || st.State != status.LineageHeld || q.Lineage().Foreign != other || len(leased) != 5 {
					t.Fatalf("not held: done %v, status %+v, lineage %+v, leased %d", c.Done(), st, q.Lineage(), len(leased))
				}
				return
			}
			if !c.Done() || st.State != status.LineageDone || st.UnverifiedFile != other || q.Lineage().Foreign != "" || len(leased) != 6 {
				t.Fatalf("held or not reported: done %v, status %+v, lineage %+v, leased %d", c.Done(), st, q.Lineage(), len(leased))
			}
			var journalled bool
			q.Events(time.Time{}, func(e queue.Event) bool {
				journalled = journalled || e.Action == queue.ActionLineage && e.Detail["unverified_file"] == other
				return true
			})
			if !journalled {
				t.Error("the unverified file is not in the journal")
			}
			q.Close()
			if err := queue.CheckLeftovers(filepath.Join(dir, "agent.db")); err != nil {
				t.Fatalf("the next start is refused: %v", err)
			}
		})
	}
}
