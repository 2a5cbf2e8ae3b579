package builder

import (
	"context"
	"os"
	stdsync "sync"
	"time"

	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/internal/disk"
	"github.com/rxedge/agent/internal/version"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
)

// Sources are what a Builder reads.
type Sources struct {
	Queue *queue.Queue
	// Connection reports the sender's state. Nil means the agent is not
	// running (the CLI reading the file directly).
	Connection func() status.Connection
	// Running is true in the agent process.
	Running bool
	// Clock stamps the document and ages. Default time.Now.
	Clock func() time.Time
	// Intakes counts what each intake took; nil when not running.
	Intakes func() []status.Intake
	// Ledger reports the signing key's part of the ledger (the public
	// key, a lost key, the last error); nil when not known.
	Ledger func() status.Ledger
	// LineageCheck reports the start-up check of the data file against
	// central's record (nil, or a nil answer, when there is none).
	LineageCheck func() *status.LineageCheck
}

// Builder builds the status document from the queue's counters (no scan),
// the sender's connection and the recent rates. The rates are sampled by
// Run; the samples are owned by a mutex, so a Builder may serve concurrent
// requests.
type Builder struct {
	src     Sources
	started time.Time
	rates   rates
}

// New returns a Builder over src.
func New(src Sources) *Builder {
	if src.Clock == nil {
		src.Clock = time.Now
	}
	return &Builder{src: src, started: src.Clock()}
}

// SampleInterval is how often Run samples the counters for the rates.
const SampleInterval = 10 * time.Second

// Run samples the counters for the recent rates until ctx ends.
func (b *Builder) Run(ctx context.Context) {
	t := time.NewTicker(SampleInterval)
	defer t.Stop()
	b.sample()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			b.sample()
		}
	}
}

func (b *Builder) sample() {
	if st, err := b.src.Queue.Stats(); err == nil {
		b.rates.add(b.src.Clock(), st.NextSeq-1, st.SyncedTotal, st.QuarantinedTotal)
	}
}

// Status builds the status document.
func (b *Builder) Status() (*status.Status, error) {
	q := b.src.Queue
	qs, err := q.Stats()
	if err != nil {
		return nil, err
	}
	now := b.src.Clock()
	st := &status.Status{
		StoreID:     qs.StoreID,
		Agent:       status.Agent{Running: b.src.Running, Version: version.Get().Version},
		SyncedTotal: qs.SyncedTotal,
		HighestSeq:  qs.NextSeq - 1,
		Leased:      q.Leased(),
		DataFile:    status.DataFile{Path: qs.Path, SizeBytes: qs.FileSize, Schema: qs.SchemaVersion},
		GeneratedAt: now.UTC(),
	}
	if b.src.Running {
		st.Agent.PID = os.Getpid()
		started := b.started.UTC()
		st.Agent.StartedAt = &started
	}
	if l := q.Lineage(); l.FileID != "" {
		fl := &status.FileLineage{FileID: l.FileID, Origin: l.Origin, Prev: l.Prev, Base: l.Base, Confirmed: l.Confirmed(), Foreign: l.Foreign}
		if !l.At.IsZero() {
			at := l.At.UTC()
			fl.At = &at
		}
		if !l.RestoredAt.IsZero() {
			at := l.RestoredAt.UTC()
			fl.RestoredAt = &at
		}
		if b.src.LineageCheck != nil {
			fl.Check = b.src.LineageCheck()
		}
		st.DataFile.Lineage = fl
	}
	if free, err := disk.Free(qs.Path); err == nil {
		st.DataFile.FreeBytes = free
	}
	cc := func(state queue.State) status.ClassCounts {
		c := qs.Counts[state]
		return status.ClassCounts{Controlled: c[1], Ordinary: c[0], Total: c[0] + c[1]}
	}
	st.Counts = status.Counts{Pending: cc(queue.Pending), Synced: cc(queue.Synced), Quarantined: cc(queue.Quarantined), Purged: cc(queue.Purged)}
	if !qs.OldestPending.IsZero() {
		t := qs.OldestPending.UTC()
		st.OldestPendingAt = &t
		st.OldestPendingAge = max(now.Sub(t).Seconds(), 0)
	}
	if b.src.Connection != nil {
		st.Connection = b.src.Connection()
	} else {
		st.Connection.State = status.Stopped
		// What a stopped agent last delivered is in its file.
		if at, err := q.LastSyncedAt(); err == nil && !at.IsZero() {
			st.Connection.LastSyncAt = &at
		}
	}
	if ls, err := q.Ledger(); err == nil {
		l := status.Ledger{}
		if b.src.Ledger != nil {
			l = b.src.Ledger()
		}
		l.Log, l.First, l.Size, l.Signed, l.Published = ls.Log, ls.First, ls.Size, ls.Signed, ls.Published
		if ls.Latest != nil {
			at := ls.Latest.SignedAt.UTC()
			l.LastCheckpointAt = &at
			l.LastCheckpointKey = ledger.SignerKeyID([]byte(ls.Latest.Note), qs.StoreID)
		}
		st.Ledger = &l
	}
	st.Rates = b.rates.perMinute()
	if b.src.Intakes != nil {
		st.Intakes = b.src.Intakes()
	}
	return st, nil
}

// rates keeps five minutes of counter samples.
type rates struct {
	mu      stdsync.Mutex
	samples []sample
}

type sample struct {
	at                            time.Time
	accepted, synced, quarantined uint64
}

func (r *rates) add(at time.Time, accepted, synced, quarantined uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, sample{at, accepted, synced, quarantined})
	for len(r.samples) > 2 && at.Sub(r.samples[0].at) > 5*time.Minute {
		r.samples = r.samples[1:]
	}
}

func (r *rates) perMinute() status.Rates {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.samples) < 2 {
		return status.Rates{}
	}
	a, b := r.samples[0], r.samples[len(r.samples)-1]
	mins := b.at.Sub(a.at).Minutes()
	if mins <= 0 {
		return status.Rates{}
	}
	return status.Rates{
		AcceptedPerMinute:    float64(b.accepted-a.accepted) / mins,
		SyncedPerMinute:      float64(b.synced-a.synced) / mins,
		QuarantinedPerMinute: float64(b.quarantined-a.quarantined) / mins,
	}
}
