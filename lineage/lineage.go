// Package lineage asks central, once it is reachable after each start,
// what it holds for the store, and tells the data file (queue.Confirm), so
// that no store sequence is ever given to two movements, whatever happened
// to the PC: a replaced PC's new file continues after the old file's
// sequences, a restored copy after what central already holds.
//
// A store's identity cannot read the archive (the generated server
// configuration grants it no consumer and no archive read). What it can
// read, and what this package reads:
//
//   - its own fleet-view summary (central.FleetDirectGetSubject), which it
//     writes with every heartbeat: the highest sequence its file had given,
//     sent or not, and that file's identity. It is the only record central
//     has of sequences a lost file gave but never delivered, and it is
//     kept until an operator removes the store.
//   - the last movement central stored for it (central.LastMovementSubject,
//     its own direct-get grant): the freshest sequence and file identity,
//     but only within the dedupe horizon, and the last stored is not
//     always the highest (a redrive stores an old sequence last).
//
// The record is the higher of the two. The summary may lag the last
// movement by one heartbeat interval and the last movement may not be the
// highest; together they are right unless both are: a movement stored in
// the heartbeat interval before the old file was lost, with a higher
// sequence than the movement stored after it.
package lineage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/queue"
)

// Record is what central holds for a store, with where each part came
// from.
type Record struct {
	queue.CentralRecord
	// LastStored is the sequence and file of the last movement central
	// stored for the store (0 when none within the horizon).
	LastStored     uint64
	LastStoredFile string
	// Summary is the highest sequence and file of the store's fleet-view
	// summary (0 when none).
	Summary     uint64
	SummaryFile string
	// SummaryErr is why the summary could not be read ("" when it was or
	// there is none): an older server configuration without the grant.
	SummaryErr string
}

// errForeign is a check that found another data file giving the store's
// sequences.
var errForeign = errors.New("lineage: central's record names a data file this one does not know")

// errNotFound is a direct get of a subject with no message.
var errNotFound = errors.New("lineage: no message")

// directGet asks central for the last message of a direct-get subject.
func directGet(ctx context.Context, nc *nats.Conn, subject string) (*nats.Msg, error) {
	resp, err := nc.RequestWithContext(ctx, subject, nil)
	if err != nil {
		return nil, err
	}
	if st := resp.Header.Get("Status"); st != "" {
		if st == "404" {
			return nil, errNotFound
		}
		return nil, fmt.Errorf("status %s %s", st, resp.Header.Get("Description"))
	}
	return resp, nil
}

// Read reads central's record of store. The read of the last movement
// must succeed (no message is an answer); the summary is best effort.
func Read(ctx context.Context, nc *nats.Conn, store string, timeout time.Duration) (Record, error) {
	var rec Record
	mctx, cancel := context.WithTimeout(ctx, timeout)
	m, err := directGet(mctx, nc, central.LastMovementSubject(store))
	cancel()
	switch {
	case errors.Is(err, errNotFound):
	case err != nil:
		return rec, fmt.Errorf("lineage: read the last movement central stored for %s: %w", store, err)
	default:
		seq, perr := strconv.ParseUint(m.Header.Get(central.HeaderSeq), 10, 64)
		if perr != nil {
			return rec, fmt.Errorf("lineage: the last movement central stored for %s has no valid %s header", store, central.HeaderSeq)
		}
		rec.LastStored, rec.LastStoredFile = seq, m.Header.Get(central.HeaderFile)
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	m, err = directGet(sctx, nc, central.FleetDirectGetSubject(store))
	cancel()
	switch {
	case errors.Is(err, errNotFound):
	case err != nil:
		rec.SummaryErr = err.Error()
	default:
		var s command.Summary
		if jerr := json.Unmarshal(m.Data, &s); jerr != nil {
			rec.SummaryErr = "the fleet-view summary is not readable: " + jerr.Error()
		} else {
			rec.Summary, rec.SummaryFile = s.HighestSeq, s.FileID
		}
	}
	rec.Highest, rec.FileID = rec.LastStored, rec.LastStoredFile
	if rec.Summary > rec.Highest {
		rec.Highest, rec.FileID = rec.Summary, rec.SummaryFile
	}
	return rec, nil
}

// Checker confirms the data file against central once per start.
type Checker struct {
	q       *queue.Queue
	store   string
	log     *slog.Logger
	timeout time.Duration

	conn    atomic.Pointer[nats.Conn]
	poke    chan struct{}
	done    atomic.Bool
	lastErr atomic.Pointer[string]
}

// New returns a checker of q for store; timeout bounds each read.
func New(q *queue.Queue, store string, log *slog.Logger, timeout time.Duration) *Checker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &Checker{q: q, store: store, log: log, timeout: timeout, poke: make(chan struct{}, 1)}
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

// Run checks when a connection is up, retrying with a growing wait until
// it succeeded or ctx ends. A file confirmed already (no fence) is left
// alone.
func (c *Checker) Run(ctx context.Context) {
	if c.q.Lineage().Confirmed() {
		c.done.Store(true)
		return
	}
	wait := time.Second
	for {
		nc := c.conn.Load()
		if nc != nil && nc.IsConnected() {
			err := c.check(ctx, nc)
			if err == nil {
				c.done.Store(true)
				return
			}
			if errors.Is(err, errForeign) {
				return // held until an operator decides
			}
			msg := err.Error()
			c.lastErr.Store(&msg)
			c.log.Warn("LINEAGE_CHECK_FAILED", "error", msg, "retry_in", wait.String())
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

func (c *Checker) check(ctx context.Context, nc *nats.Conn) error {
	rec, err := Read(ctx, nc, c.store, c.timeout)
	if err != nil {
		return err
	}
	if rec.SummaryErr != "" {
		c.log.Warn("LINEAGE_SUMMARY_UNREAD", "error", rec.SummaryErr,
			"hint", "the server configuration predates the grant to read the store's own fleet summary: regenerate it (agent central config)")
	}
	conf, err := c.q.Confirm(rec.CentralRecord)
	if err != nil {
		return fmt.Errorf("lineage: confirm the data file: %w", err)
	}
	attrs := []any{"file", conf.FileID, "origin", conf.Origin, "central_highest", rec.Highest, "central_file", rec.FileID}
	if conf.Foreign != "" {
		c.log.Error("DATA_FILE_FOREIGN", append(attrs, "detail", "central's record names a data file this one does not know: another data file gives the store's sequences (a cloned PC or VM?); nothing is sent until an operator decides: stop the agent and run `agent data adopt` or `agent data discard`")...)
		return errForeign
	}
	switch {
	case conf.Behind && conf.Origin == queue.OriginRestored:
		c.log.Error("DATA_FILE_RESTORED", append(attrs, "prev", conf.Prev, "renumbered", conf.Renumbered,
			"detail", "the data file is older than central's record of the store: it continues after central's highest sequence")...)
	case conf.Behind:
		c.log.Warn("DATA_FILE_REPLACED", append(attrs, "prev", conf.Prev, "renumbered", conf.Renumbered)...)
	default:
		c.log.Info("DATA_FILE_CONFIRMED", attrs...)
	}
	return nil
}

// Done reports whether the file was confirmed in this start.
func (c *Checker) Done() bool { return c.done.Load() }

// LastError is why the last check failed ("" when none did).
func (c *Checker) LastError() string {
	if p := c.lastErr.Load(); p != nil {
		return *p
	}
	return ""
}
