// Command fixturegen writes testdata/NAME.db.gz and testdata/NAME.json.gz
// with the queue package of an older schema: v2 (schema 2) was written at
// commit 500e9f4, v3 (schema 3) at commit 328d75a. Each is a data file
// holding every state (pending, retried, synced with stream sequences, quarantined with
// failure history, redriven, purged, pruned), a journal, counters and a
// renumbered lineage with a fence standing, and what the public API said
// of it. The migration test opens the file with the current package and
// compares what it says with that record. The dump function is the one of
// queue/migrate_test.go; keep both alike.
//
//	go run ./queue/testdata/fixturegen -name v2 -out queue/testdata   (at commit 500e9f4)
//	go run ./queue/testdata/fixturegen -name v3 -out queue/testdata   (at commit 328d75a)
package main

import (
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
)

const store = "S0042"

type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func prep(id string, variant int, schedule string) movement.Prepared {
	sched := ""
	if schedule != "" {
		sched = fmt.Sprintf(`,"schedule":%q`, schedule)
	}
	js := fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":%d,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"%s}`, id, variant+1, sched)
	p, es := movement.Prepare([]byte(js), store, time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	if es != nil {
		log.Fatalf("prepare %s: %v", id, es)
	}
	return p
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func main() {
	out := flag.String("out", "queue/testdata", "directory")
	name := flag.String("name", "", "the fixture's name: v2 or v3 (by the commit it is run at)")
	flag.Parse()
	if *name == "" {
		log.Fatal("-name is required")
	}
	dir, err := os.MkdirTemp("", "fixturegen")
	must(err)
	defer os.RemoveAll(dir)
	g := &gen{
		path:      filepath.Join(dir, "agent.db"),
		clk:       &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)},
		rnd:       rand.New(rand.NewPCG(1, 2)),
		streamSeq: 5000,
	}
	g.history()

	// The file as the old agent left it, and what it holds.
	raw, err := os.ReadFile(g.path)
	must(err)
	writeGzip(filepath.Join(*out, *name+".db.gz"), raw)
	q, err := queue.Open(queue.Options{Path: g.path, StoreID: store, Clock: g.clk.Now})
	must(err)
	d := dump(q, g.ids)
	must(q.Close())
	b, err := json.Marshal(d)
	must(err)
	writeGzip(filepath.Join(*out, *name+".json.gz"), b)
}

// gen makes a data file's history: movements enqueued, settled at random,
// pruned, redriven and purged, renumbered by a lineage start.
type gen struct {
	path      string
	clk       *clock
	rnd       *rand.Rand
	q         *queue.Queue
	ids       []string
	next      int
	streamSeq uint64
}

// history writes the whole history into the file at g.path.
func (g *gen) history() {
	var err error
	g.q, err = queue.Open(queue.Options{Path: g.path, StoreID: store, Clock: g.clk.Now})
	must(err)
	g.enqueue(1200)
	for i := 0; i < 6; i++ {
		g.settle(150, 0.8, 0.12)
		g.clk.now = g.clk.now.Add(25 * time.Second)
	}
	// The oldest synced keys pass the horizon.
	g.clk.now = g.clk.now.Add(31 * 24 * time.Hour)
	n, err := g.q.Prune(30*24*time.Hour, 0, 250)
	must(err)
	log.Printf("pruned %d", n)
	g.enqueue(800)
	for i := 0; i < 5; i++ {
		g.settle(200, 0.75, 0.15)
		g.clk.now = g.clk.now.Add(25 * time.Second)
	}
	g.operate()
	must(g.q.Close())

	// A start with lineage: movements held back, then central says the
	// file is behind it: they are renumbered.
	g.q, err = queue.Open(queue.Options{Path: g.path, StoreID: store, Clock: g.clk.Now, Lineage: true})
	must(err)
	g.enqueue(150)
	last, err := g.q.LastSeq()
	must(err)
	_, err = g.q.Confirm(queue.CentralRecord{Highest: last + 7, FileID: "0b7d3c1e-6a57-4e51-9a77-3f4d2c1b0a99"})
	must(err)
	g.settle(60, 1, 0)
	must(g.q.Close())
	// A last start leaves a fence standing over a few held movements.
	g.q, err = queue.Open(queue.Options{Path: g.path, StoreID: store, Clock: g.clk.Now, Lineage: true})
	must(err)
	g.enqueue(40)
	must(g.q.Close())
}

// operate redrives and purges some quarantined movements, as an operator
// would, settles some more and journals a start.
func (g *gen) operate() {
	var quarantined [][16]byte
	must(g.q.ForEachQuarantined(func(r *queue.Record) bool {
		quarantined = append(quarantined, r.Key)
		return true
	}))
	log.Printf("%d quarantined", len(quarantined))
	_, err := g.q.Redrive(queue.Redrive{Keys: quarantined[:20], Actor: "local:op", Reason: "fixed upstream"})
	must(err)
	_, err = g.q.Purge(queue.Purge{Keys: quarantined[20:30], Actor: "local:op", Reason: "entered twice"})
	must(err)
	g.clk.now = g.clk.now.Add(time.Minute)
	g.settle(100, 0.9, 0.05)
	must(g.q.Journal(queue.Event{Action: queue.ActionStart, Actor: queue.ActorAgent, Detail: map[string]string{"version": "1.2.3"}}))
}

// enqueue submits n movements in batches of 100; every seventh is CII.
func (g *gen) enqueue(n int) {
	var items []movement.Prepared
	for i := 0; i < n; i++ {
		g.next++
		id := fmt.Sprintf("M%06d", g.next)
		sched := ""
		if g.next%7 == 0 {
			sched = "CII"
		}
		g.ids = append(g.ids, id)
		items = append(items, prep(id, 0, sched))
		if len(items) == 100 {
			_, err := g.q.Enqueue(items)
			must(err)
			items = nil
			g.clk.now = g.clk.now.Add(time.Millisecond)
		}
	}
	if len(items) > 0 {
		_, err := g.q.Enqueue(items)
		must(err)
	}
}

// settle leases up to n due movements and acks, retries or quarantines
// each at random.
func (g *gen) settle(n int, ackP, retryP float64) {
	l, err := g.q.Lease(g.clk.now, n)
	must(err)
	var st queue.Settlement
	for _, r := range l {
		switch x := g.rnd.Float64(); {
		case x < ackP:
			g.streamSeq += uint64(1 + g.rnd.IntN(3))
			st.Acks = append(st.Acks, queue.Ack{Seq: r.Seq, StreamSeq: g.streamSeq})
		case x < ackP+retryP:
			st.Retries = append(st.Retries, queue.RetryAt{Seq: r.Seq, Delay: time.Duration(1+g.rnd.IntN(20)) * time.Second,
				Failure: queue.Failure{Kind: "transient:timeout", Text: "no answer in time"}, Uncharged: g.rnd.IntN(4) == 0})
		default:
			st.Quarantines = append(st.Quarantines, queue.QuarantineAt{Seq: r.Seq, Reason: "permanent:too_large",
				Failure: queue.Failure{Kind: "permanent:too_large", Text: "over the limit"}, Charge: g.rnd.IntN(2) == 0,
				ConnState: "connected", AgentVersion: "1.2.3"})
		}
	}
	must(g.q.Settle(st))
	g.clk.now = g.clk.now.Add(time.Second)
}

// writeGzip writes b to path, compressed as well as gzip can.
func writeGzip(path string, b []byte) {
	f, err := os.Create(path)
	must(err)
	zw, _ := gzip.NewWriterLevel(f, gzip.BestCompression)
	_, err = zw.Write(b)
	must(err)
	must(zw.Close())
	must(f.Close())
}

// state is what the public API says of a data file.
type state struct {
	Stats struct {
		Counts           map[string]map[string]uint64
		SyncedTotal      uint64
		QuarantinedTotal uint64
		OldestPending    time.Time
		NextSeq          uint64
	}
	Keys        map[string]keyState
	Lookup      queue.Lookup
	Events      []queue.Event
	Lineage     queue.Lineage
	LastSynced  time.Time
	Quarantined []*queue.Record
	Resubmit    map[string][2]string // id → answer to the same content, to other content
}

type keyState struct {
	Err   string `json:",omitempty"`
	Entry queue.Entry
}

func dump(q *queue.Queue, ids []string) state {
	var s state
	st, err := q.Stats()
	must(err)
	s.Stats.Counts = map[string]map[string]uint64{}
	for state, m := range st.Counts {
		s.Stats.Counts[state.String()] = map[string]uint64{}
		for c, n := range m {
			s.Stats.Counts[state.String()][c.String()] = n
		}
	}
	s.Stats.SyncedTotal, s.Stats.QuarantinedTotal = st.SyncedTotal, st.QuarantinedTotal
	s.Stats.OldestPending, s.Stats.NextSeq = st.OldestPending, st.NextSeq
	s.Keys = map[string]keyState{}
	s.Resubmit = map[string][2]string{}
	for _, id := range ids {
		k := movement.Key(store, id)
		e, err := q.Get(k)
		ks := keyState{Entry: e}
		if err != nil {
			ks = keyState{Err: err.Error()}
		}
		s.Keys[id] = ks
	}
	last, err := q.LastSeq()
	must(err)
	var seqs []uint64
	for i := uint64(0); i <= last+2; i++ {
		seqs = append(seqs, i)
	}
	s.Lookup, err = q.LookupSeqs(seqs)
	must(err)
	s.Lookup.Scanned = 0
	must(q.Events(time.Time{}, func(ev queue.Event) bool {
		s.Events = append(s.Events, ev)
		return true
	}))
	s.Lineage = q.Lineage()
	s.LastSynced, err = q.LastSyncedAt()
	must(err)
	must(q.ForEachQuarantined(func(r *queue.Record) bool {
		s.Quarantined = append(s.Quarantined, r)
		return true
	}))
	for i, id := range ids {
		if i%5 != 0 {
			continue
		}
		sched := ""
		if (i+1)%7 == 0 {
			sched = "CII"
		}
		var ans [2]string
		for v := 0; v < 2; v++ {
			res, err := q.EnqueueEach([]movement.Prepared{prep(id, v, sched)})
			must(err)
			r := res[0]
			ans[v] = fmt.Sprintf("seq=%d dup=%v", r.Seq, r.Duplicate)
			if r.Err != nil {
				ans[v] = r.Err.Error()
			}
		}
		s.Resubmit[id] = ans
	}
	return s
}
