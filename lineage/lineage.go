// Package lineage asks central, once it is reachable after each start,
// what it holds for the store, and tells the data file (queue.Confirm), so
// that no store sequence is ever given to two movements, whatever happened
// to the PC: a replaced PC's new file continues after the old file's
// sequences, a restored copy after what central already holds.
//
// A store's identity cannot read the archive (the generated server
// configuration grants it no consumer and no archive read), and a direct
// get by subject answers only the last message, so it cannot page back.
// What it can read, and what this package reads:
//
//   - its own fleet-view summary (central.FleetDirectGetSubject), which it
//     writes with every heartbeat: the highest sequence its file had given,
//     sent or not, and that file's identity. It is the only record central
//     has of sequences a lost file gave but never delivered, and it is
//     kept until an operator removes the store.
//   - the last message central stored on its movement subjects
//     (central.LastMovementSubject, its own direct-get grant): a movement
//     or a checkpoint, with the freshest sequence and file identity, but
//     only within the dedupe horizon, and the last stored is not always
//     the highest (a redrive stores an old sequence last).
//
// The record is the higher of the two. The summary may lag the last
// movement by one heartbeat interval and the last movement may not be the
// highest; together they are right unless both are: a movement stored in
// the heartbeat interval before the old file was lost, with a higher
// sequence than the movement stored after it.
//
// Others can write there too: a user of the streams' account can aim a
// JetStream answer at a store's subject as its reply subject, where the
// stream stores it; a tool that copies movements, or central's
// administrator, can publish anything. Nothing the check cannot interpret
// holds the store (DESIGN P10): a record the store did not write as it
// writes its own is skipped, counted, logged once, journalled and shown in
// status (ClassifyLast, ClassifySummary), and the check decides from what
// is left (Decide); with nothing left the file starts as a new file would.
// A record that only looks like the store's moves the file's sequences
// forward, never past MaxLead beyond the store's own summary, and never
// holds it (docs/DESIGN.md, "Lineage").
package lineage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
)

// Options configure a Checker.
type Options struct {
	Queue  *queue.Queue
	Store  string
	Logger *slog.Logger
	// Timeout bounds each read of central (default 5 s).
	Timeout time.Duration
	// PublicKey is the store's checkpoint verifier key ("" when it has
	// none): a checkpoint it verifies is the store's own message. Nil
	// verifies nothing.
	PublicKey func() string
	// Clock stamps the check (default time.Now).
	Clock func() time.Time
}

// Checker confirms the data file against central once per start. Run owns
// the check; its state for the status document is kept under a mutex.
type Checker struct {
	o    Options
	conn atomic.Pointer[nats.Conn]
	poke chan struct{}
	done atomic.Bool

	mu    stdsync.Mutex
	state status.LineageCheck
}

// New returns a checker of o.Queue for o.Store.
func New(o Options) *Checker {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	c := &Checker{o: o, poke: make(chan struct{}, 1)}
	c.state.State = status.LineageWaiting
	return c
}

// OnConnect hands the checker a connection (a sync.Engine OnConnect
// handler).
func (c *Checker) OnConnect(nc *nats.Conn) error {
	c.conn.Store(nc)
	select {
	case c.poke <- struct{}{}:
	default:
	}
	return nil
}

// Run checks when a connection is up, retrying a read that failed with a
// growing wait (at most 30 s) until the check is done or ctx ends. Only a
// failure to read or to write the file is retried: every record central
// answers with is decided on at once. A file confirmed already (no fence)
// is left alone.
func (c *Checker) Run(ctx context.Context) {
	if c.o.Queue.Lineage().Confirmed() {
		c.update(func(s *status.LineageCheck) { s.State = status.LineageDone })
		c.done.Store(true)
		return
	}
	wait, logged := time.Second, ""
	for {
		if nc := c.conn.Load(); nc != nil && nc.IsConnected() {
			held, err := c.check(ctx, nc)
			if err == nil {
				c.done.Store(!held)
				return // held: until an operator decides
			}
			msg := err.Error()
			c.update(func(s *status.LineageCheck) { s.Attempts++; s.Error = msg })
			if msg != logged { // the same failure is logged once, not every 30 s
				c.o.Logger.Warn("LINEAGE_CHECK_FAILED", "error", msg, "retry_in", wait.String())
				logged = msg
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-c.poke:
			t.Stop()
		case <-t.C:
			wait = min(2*wait, 30*time.Second)
		}
	}
}

// check reads central's record, decides and confirms the file; held is
// true when the file now waits for an operator.
func (c *Checker) check(ctx context.Context, nc *nats.Conn) (held bool, err error) {
	key := ""
	if c.o.PublicKey != nil {
		key = c.o.PublicKey()
	}
	last, sum, err := Read(ctx, nc, c.o.Store, key, c.o.Timeout)
	if err != nil {
		return false, err
	}
	if sum.Found == FoundUnread {
		c.o.Logger.Warn("LINEAGE_SUMMARY_UNREAD", "error", sum.Err,
			"hint", "the server configuration predates the grant to read the store's own fleet summary: regenerate it (hq central-config)")
	}
	v := Decide(Evidence{File: c.o.Queue.Lineage(), Last: last, Summary: sum})
	conf, err := c.o.Queue.Confirm(v.Record)
	if err != nil {
		return false, fmt.Errorf("lineage: confirm the data file: %w", err)
	}
	c.report(v, conf)
	return conf.Foreign != "", nil
}

// report says what the check decided, once: in the log, in the journal
// when something was skipped or unverified, and in the status.
func (c *Checker) report(v Verdict, conf queue.Confirmation) {
	log := c.o.Logger
	for _, s := range v.Skipped {
		log.Warn("LINEAGE_RECORD_SKIPPED", "where", s.Where, "reason", s.Skip, "stream", s.Stream, "stream_seq", s.StreamSeq,
			"detail", "a record on central the store did not write as it writes its own: passed over, not interpreted")
	}
	attrs := []any{"file", conf.FileID, "origin", conf.Origin, "from", v.From, "central_highest", v.Record.Highest, "central_file", v.Record.FileID, "skipped", len(v.Skipped)}
	switch {
	case conf.Foreign != "":
		log.Error("DATA_FILE_FOREIGN", append(attrs, "detail", "central's record names a data file this one does not know: another data file gives the store's sequences (a cloned PC or VM?); nothing is sent until an operator decides: stop the agent and run `agent data adopt` or `agent data discard`")...)
	case conf.Behind && conf.Origin == queue.OriginRestored:
		log.Error("DATA_FILE_RESTORED", append(attrs, "prev", conf.Prev, "renumbered", conf.Renumbered,
			"detail", "the data file is older than central's record of the store: it continues after central's highest sequence")...)
	case conf.Behind:
		log.Warn("DATA_FILE_REPLACED", append(attrs, "prev", conf.Prev, "renumbered", conf.Renumbered)...)
	default:
		log.Info("DATA_FILE_CONFIRMED", attrs...)
	}
	if v.Unverified != "" {
		log.Warn("DATA_FILE_UNVERIFIED", "file", conf.FileID, "central_file", v.Unverified,
			"detail", "only a record the store cannot trust names a data file this one does not know: reported, not held; if another PC runs as this store, switch it off")
	}
	c.journal(v, conf)
	now := c.o.Clock().UTC()
	c.update(func(s *status.LineageCheck) {
		s.State, s.At, s.From, s.CentralHighest, s.Error = status.LineageDone, &now, v.From, v.Record.Highest, ""
		if conf.Foreign != "" {
			s.State = status.LineageHeld
		}
		s.Skipped, s.SkippedRecords, s.UnverifiedFile = len(v.Skipped), nil, v.Unverified
		for _, k := range v.Skipped {
			s.SkippedRecords = append(s.SkippedRecords, status.SkippedRecord{Where: k.Where, Reason: k.Skip, Stream: k.Stream, StreamSeq: k.StreamSeq})
		}
	})
}

// journal records the records skipped and a file named only by an
// unverified record, when there are any (P8: what the agent passed over
// is on record, with where central holds it).
func (c *Checker) journal(v Verdict, conf queue.Confirmation) {
	if len(v.Skipped) == 0 && v.Unverified == "" {
		return
	}
	d := map[string]string{"file": conf.FileID, "from": v.From, "central_highest": strconv.FormatUint(v.Record.Highest, 10), "skipped": strconv.Itoa(len(v.Skipped))}
	for i, s := range v.Skipped {
		d[fmt.Sprintf("skipped_%d", i+1)] = fmt.Sprintf("%s: %s (%s #%d)", s.Where, s.Skip, s.Stream, s.StreamSeq)
	}
	if v.Unverified != "" {
		d["unverified_file"] = v.Unverified
	}
	err := c.o.Queue.Journal(queue.Event{Action: queue.ActionLineage, Actor: queue.ActorAgent, Detail: d,
		Reason: "the start-up lineage check passed over records on central the store did not write as it writes its own, or that it cannot trust"})
	if err != nil && !errors.Is(err, queue.ErrClosed) {
		c.o.Logger.Warn("LINEAGE_JOURNAL_FAILED", "error", err.Error())
	}
}

func (c *Checker) update(f func(*status.LineageCheck)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(&c.state)
}

// Status is the check's part of the status document.
func (c *Checker) Status() *status.LineageCheck {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.state
	s.SkippedRecords = append([]status.SkippedRecord(nil), c.state.SkippedRecords...)
	return &s
}

// Done reports whether the file was confirmed in this start.
func (c *Checker) Done() bool { return c.done.Load() }

// LastError is why the last check failed ("" when none did).
func (c *Checker) LastError() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state.Error
}
