package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/status"
)

// Entry is one key of the fleet view as central holds it. Store is
// the key, which only that store's identity can write; LastSeen is the
// server's time of the write. Reflected says the record carries, of its
// own, the headers central adds to a direct get's answer
// (central.ServerHeaders): written to pass for another store's, or a
// JetStream answer aimed at the key, it answers for no one.
type Entry struct {
	Store     string
	LastSeen  time.Time
	Value     []byte
	Reflected bool
}

// Read reads the latest summary of every store from the fleet view,
// with direct gets (no consumer, no stream info).
func Read(ctx context.Context, nc *nats.Conn) ([]Entry, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return ReadWith(ctx, js)
}

// readBatch is how many summaries one direct get answers with.
const readBatch = 1000

// ReadWith is Read through js, for an identity whose JetStream
// API has another prefix. It walks the fleet stream in batches of direct
// gets from its first message: the stream keeps one message per store,
// so the walk is the view, and it is not bounded by the server's limit
// on one multi-subject request (1,024 subjects). A store that writes
// again during the walk may be met twice: its newest summary is kept.
// Each entry's store, time and place in the stream are central's (the
// last value of each header, central.ReadStored), never what a store
// put on its record.
func ReadWith(ctx context.Context, js jetstream.JetStream) ([]Entry, error) {
	var out []Entry
	at := map[string]int{}
	for seq := uint64(1); ; {
		msgs, err := getBatch(ctx, js, seq, readBatch)
		if err != nil {
			return nil, fmt.Errorf("remote: read the fleet view (%s): %w", central.FleetStreamName, err)
		}
		if len(msgs) == 0 {
			return out, nil
		}
		for _, m := range msgs {
			seq = m.Seq + 1
			e := Entry{Store: strings.TrimPrefix(m.Subject, central.FleetPrefix), LastSeen: m.Time, Value: m.data, Reflected: m.Reflected}
			if i, ok := at[e.Store]; ok {
				out[i] = e
				continue
			}
			at[e.Store] = len(out)
			out = append(out, e)
		}
	}
}

// batchMsg is one record of a batch direct get.
type batchMsg struct {
	central.Stored
	data []byte
}

// Why a batch direct get failed.
var (
	errBatchEnded   = errors.New("the answer ended before its last message (no end-of-batch)")
	errBatchTooLong = errors.New("the answer holds more messages than asked for")
)

// batchWait bounds the wait for each message of a batch's answer when
// ctx sets no deadline.
const batchWait = 10 * time.Second

// getBatch direct-gets up to n messages of the fleet stream from stream
// sequence seq on, and reads each one's place from central's own
// headers (central.ReadStored), so that what a store wrote on its record
// chooses nothing: not its store, not its time, and not where the walk
// goes on. An empty answer is the stream's end.
func getBatch(ctx context.Context, js jetstream.JetStream, seq uint64, n int) ([]batchMsg, error) {
	nc := js.Conn()
	req, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj"`
		Batch   int    `json:"batch"`
	}{seq, central.FleetSubjects, n})
	if err != nil {
		return nil, err
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(apiPrefix(js)+"DIRECT.GET."+central.FleetStreamName, inbox, req); err != nil {
		return nil, err
	}
	var out []batchMsg
	for {
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if _, ok := ctx.Deadline(); !ok {
			wctx, cancel = context.WithTimeout(ctx, batchWait)
		}
		m, err := sub.NextMsgWithContext(wctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errBatchEnded, err)
		}
		st, stored := central.ReadStored(m.Header)
		switch status := m.Header.Get("Status"); {
		case !stored && status == "404":
			return out, nil
		case !stored && status == "204":
			return out, nil // end of batch
		case !stored:
			return nil, fmt.Errorf("status %q %s", status, command.Clip(m.Header.Get("Description")))
		case len(out) >= n:
			return nil, errBatchTooLong
		}
		out = append(out, batchMsg{Stored: st, data: m.Data})
	}
}

// apiPrefix is js's JetStream API prefix, with its final dot.
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	}
	return jetstream.DefaultAPIPrefix
}

// Fleet states of a store, from the best to the worst.
const (
	OK           = "ok"
	Attention    = "needs_attention" // it reports quarantined or old movements, or a paused sender
	Stale        = "stale"           // not seen for longer than the stale limit
	Silent       = "silent"          // not seen for longer than the silent limit
	Missing      = "missing"         // on the roster, never seen
	Unverifiable = "unverifiable"    // its value does not read, or names another store
	Unknown      = "unknown"         // seen, but not on the roster
)

// Store is one store's line of the fleet view.
type Store struct {
	Store    string           `json:"store"`
	State    string           `json:"state"`
	LastSeen *time.Time       `json:"last_seen,omitempty"`
	Summary  *command.Summary `json:"summary,omitempty"`
	Problems []string         `json:"problems,omitempty"`
}

// Limits say when a store is stale or silent, and when its
// movements need attention.
type Limits struct {
	Stale, Silent, MaxAge time.Duration
}

// Judge turns the entries of the fleet view and a roster (nil: no
// roster) into one line per store, sorted by store: the store id is the
// key's, the last-seen time the server's; a value that names another
// store or does not read is unverifiable. Every state but OK needs
// attention.
func Judge(entries []Entry, roster []string, now time.Time, l Limits) []Store {
	seen := map[string]bool{}
	var out []Store
	for _, e := range entries {
		seen[e.Store] = true
		out = append(out, judgeEntry(e, roster == nil || slices.Contains(roster, e.Store), now, l))
	}
	for _, r := range roster {
		if !seen[r] {
			out = append(out, missingStore(r))
		}
	}
	slices.SortFunc(out, func(a, b Store) int { return cmp.Compare(a.Store, b.Store) })
	return out
}

// missingStore is the line of a store on the roster that was never seen.
func missingStore(store string) Store {
	return Store{Store: store, State: Missing, Problems: []string{"never seen"}}
}

// judgeEntry is one entry's line: onRoster says whether the roster (or
// the absence of one) admits its store.
func judgeEntry(e Entry, onRoster bool, now time.Time, l Limits) Store {
	s, fs := decodeEntry(e)
	judgeSeen(&fs, s, onRoster, now, l)
	return fs
}

// decodeEntry reads an entry's summary: an unverifiable line when it
// does not read or names another store.
func decodeEntry(e Entry) (command.Summary, Store) {
	at := e.LastSeen
	fs := Store{Store: e.Store, LastSeen: &at, State: OK}
	var s command.Summary
	switch err := json.Unmarshal(e.Value, &s); {
	case e.Reflected:
		fs.State, fs.Problems = Unverifiable, []string{"its record carries the headers central adds to its answers (Nats-Subject, Nats-Time-Stamp): written to pass for another record"}
	case err != nil:
		fs.State, fs.Problems = Unverifiable, []string{"its summary does not read"}
	case s.StoreID != e.Store:
		fs.State, fs.Problems = Unverifiable, []string{fmt.Sprintf("its summary names store %q", command.Clip(s.StoreID))}
	default:
		fs.Summary = &s
	}
	return s, fs
}

// judgeSeen judges a decoded line by the roster and by when it was last
// seen (now), then by what its summary reports.
func judgeSeen(fs *Store, s command.Summary, onRoster bool, now time.Time, l Limits) {
	quiet := now.Sub(*fs.LastSeen)
	switch {
	case fs.State == Unverifiable:
	case !onRoster:
		fs.State, fs.Problems = Unknown, []string{"not on the roster"}
	case quiet > l.Silent:
		fs.State, fs.Problems = Silent, []string{"last seen " + quiet.Round(time.Second).String() + " ago"}
	case quiet > l.Stale:
		fs.State, fs.Problems = Stale, []string{"last seen " + quiet.Round(time.Second).String() + " ago"}
	default:
		fs.State, fs.Problems = OK, nil
		if p := summaryProblems(s, l.MaxAge); len(p) > 0 {
			fs.State, fs.Problems = Attention, p
		}
	}
}

// summaryProblems is what makes the store need attention, by the rule of
// status.Status.Problems (quarantined movements, a pending movement older
// than maxAge, a paused sender), and a held lineage or a data file
// restored within status.RestoredNotice, which newer agents report.
func summaryProblems(s command.Summary, maxAge time.Duration) []string {
	st := status.Status{Connection: status.Connection{State: s.State, Reason: s.Reason}}
	st.Counts.Quarantined.Total = s.Quarantined
	if s.OldestPendingAge != nil {
		at := s.GeneratedAt.Add(-time.Duration(*s.OldestPendingAge * float64(time.Second)))
		st.OldestPendingAt = &at
		st.OldestPendingAge = *s.OldestPendingAge
	}
	out := st.Problems(maxAge)
	if s.Lineage == status.LineageHeld {
		out = append(out, "its data file is held: another data file gives the store's sequences and nothing is sent until an operator runs `agent data adopt` or `agent data discard` there")
	}
	if s.RestoredAt != nil && s.GeneratedAt.Sub(*s.RestoredAt) < status.RestoredNotice {
		out = append(out, "its data file was restored from an older copy on "+s.RestoredAt.UTC().Format(time.DateOnly)+": it continues after central's record")
	}
	return out
}
