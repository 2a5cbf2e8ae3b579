package lineage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/lineage"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
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
	m := central.Message{Store: store, Key: "00112233445566778899aabbccddeeff", Digest: "ab", Seq: 10, EnqueuedAt: time.Now(), Payload: []byte(`{}`), File: central.FileLineage{ID: "old"}}.Msg()
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	sum, _ := json.Marshal(command.Summary{StoreID: store, HighestSeq: 12, FileID: "old"})
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
	c := lineage.New(q, store, nil, 2*time.Second)
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
	if l.Origin != queue.OriginReplaced || l.Prev != "old" || l.Base != 12 || !l.Confirmed() {
		t.Fatalf("lineage %+v", l)
	}
	rs, err := q.Lease(time.Now(), 10)
	if err != nil || len(rs) != 2 || rs[0].Seq != 13 || rs[1].Seq != 14 {
		t.Fatalf("leased %v, %v; want sequences 13 and 14", rs, err)
	}
}
