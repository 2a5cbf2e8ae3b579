// Package migrate moves the movements of a one-partition central
// (RX_MOVEMENTS, subjects rx.mv.<store>.<key>) into the movement streams of
// a partitioned one (central.PartitionSubject), whose archives then source
// them.
//
// Its promise: a key ends in the partitions at most once, and a key
// already there is never overwritten. Each movement is republished with
// its own Nats-Msg-Id and Rx-* headers and an expected last subject
// sequence of 0, exactly as an agent sends it, so the partition refuses
// a key it already holds (10071) and the migration compares digests with
// a direct get: the same digest is counted as already migrated, another is
// reported as a conflict. Running it again migrates nothing twice.
package migrate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
)

// Defaults of Options.
const (
	// DefaultInFlight is how many republished movements may await their
	// acknowledgement at once.
	DefaultInFlight = 2048
	// DefaultVerifiers is how many direct gets may be in flight at once.
	DefaultVerifiers = 64
	// DefaultTimeout bounds each request to central.
	DefaultTimeout = 10 * time.Second
	// retries is how often a transient refusal (in process, a timeout) of
	// one movement is retried before it is counted failed.
	retries = 5
)

// Options say what to migrate where.
type Options struct {
	// From is the old stream; "" means central.StreamName.
	From string
	// Partitions is the number of partitions of the new layout (≥ 2).
	Partitions int
	// InFlight bounds the publishes awaiting an acknowledgement; 0 means
	// DefaultInFlight.
	InFlight int
	// Verifiers bounds the direct gets in flight; 0 means DefaultVerifiers.
	Verifiers int
	// Timeout bounds each request; 0 means DefaultTimeout.
	Timeout time.Duration
	// Progress, when set, is called with the movements settled so far
	// and the total expected, from one goroutine at a time.
	Progress func(done, total uint64)
}

// Conflict is a key the partition holds with another digest than the old
// stream: neither copy was changed. It names the key and sequences only,
// never the payload.
type Conflict struct {
	Store        string `json:"store"`
	Key          string `json:"key"`
	Stream       string `json:"stream"`        // the partition's movement stream
	OldSeq       uint64 `json:"old_seq"`       // in the old stream
	PartitionSeq uint64 `json:"partition_seq"` // in the partition's stream
}

// Failure is a movement that could not be migrated this time (central did
// not answer, or answered "already stored" without a readable copy). A
// later run tries it again.
type Failure struct {
	Store  string `json:"store,omitempty"`
	Key    string `json:"key,omitempty"`
	OldSeq uint64 `json:"old_seq"`
	Reason string `json:"reason"`
}

// Summary is what a run did.
type Summary struct {
	From       string `json:"from"`
	Partitions int    `json:"partitions"`
	// Total is how many messages the old stream held when the run began.
	Total uint64 `json:"total"`
	// Read is how many the run read (up to the last sequence when it
	// began; later ones are for the next run).
	Read uint64 `json:"read"`
	// Migrated were stored in a partition by this run.
	Migrated uint64 `json:"migrated"`
	// Already were in their partition with the same digest.
	Already uint64 `json:"already_migrated"`
	// Skipped are not movements (a subject not rx.mv.<store>.<key>, or
	// no digest in either header form): left alone.
	Skipped   uint64     `json:"skipped"`
	Conflicts []Conflict `json:"conflicts"`
	Failures  []Failure  `json:"failures"`
	// PerPartition counts the movements (migrated or already there) of
	// each partition.
	PerPartition     []uint64 `json:"per_partition"`
	Seconds          float64  `json:"seconds"`
	RecordsPerSecond float64  `json:"records_per_second"`
}

// OK reports whether every movement read is now in its partition.
func (s *Summary) OK() bool { return len(s.Conflicts) == 0 && len(s.Failures) == 0 }

// Grants are the subjects the migrating identity must be allowed to
// publish to (its inbox aside): the info of every stream involved, an
// ordered consumer on the old stream, the partitions' subjects and direct
// gets on the partitions' movement streams.
func Grants(from string, n int) []string {
	if from == "" {
		from = central.StreamName
	}
	g := []string{
		"$JS.API.STREAM.INFO." + from,
		"$JS.API.CONSUMER.CREATE." + from + ".>",
		"$JS.API.CONSUMER.MSG.NEXT." + from + ".>",
		"$JS.API.CONSUMER.DELETE." + from + ".>",
	}
	for p := range n {
		g = append(g, "$JS.API.STREAM.INFO."+central.MovementStream(p, n), "$JS.API.STREAM.INFO."+central.ArchiveStream(p, n),
			"$JS.API.DIRECT.GET."+central.MovementStream(p, n)+".>", central.PartitionSubjects(p, n))
	}
	return g
}

// ErrMissingStream: a stream the migration needs does not exist.
var ErrMissingStream = errors.New("migrate: stream missing")

// Check verifies that the old stream and every partition's movement stream
// and archive exist; it returns the old stream's info.
func Check(ctx context.Context, js jetstream.JetStream, o Options) (*jetstream.StreamInfo, error) {
	o = o.withDefaults()
	if o.Partitions < 2 || o.Partitions > central.MaxPartitions {
		return nil, fmt.Errorf("migrate: --partitions must be between 2 and %d, got %d", central.MaxPartitions, o.Partitions)
	}
	info, err := streamInfo(ctx, js, o.From, o.Timeout)
	if err != nil {
		return nil, fmt.Errorf("migrate: old stream %s: %w", o.From, err)
	}
	var missing []string
	for p := range o.Partitions {
		for _, name := range []string{central.MovementStream(p, o.Partitions), central.ArchiveStream(p, o.Partitions)} {
			if name == o.From {
				return nil, fmt.Errorf("migrate: %s is both the old stream and a partition's", name)
			}
			si, err := streamInfo(ctx, js, name, o.Timeout)
			switch {
			case errors.Is(err, jetstream.ErrStreamNotFound):
				missing = append(missing, name)
			case err != nil:
				return nil, fmt.Errorf("migrate: stream %s: %w", name, err)
			case !central.IsArchiveStream(name) && (len(si.Config.Subjects) != 1 || si.Config.Subjects[0] != central.PartitionSubjects(p, o.Partitions)):
				return nil, fmt.Errorf("migrate: stream %s takes %s, want %s: is it a layout of %d partitions?", name, strings.Join(si.Config.Subjects, ", "), central.PartitionSubjects(p, o.Partitions), o.Partitions)
			}
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %s: create the %d partitions first (hq provision --partitions %d)", ErrMissingStream, strings.Join(missing, ", "), o.Partitions, o.Partitions)
	}
	return info, nil
}

func streamInfo(ctx context.Context, js jetstream.JetStream, name string, timeout time.Duration) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return s.CachedInfo(), nil
}

func (o Options) withDefaults() Options {
	if o.From == "" {
		o.From = central.StreamName
	}
	if o.InFlight <= 0 {
		o.InFlight = DefaultInFlight
	}
	if o.Verifiers <= 0 {
		o.Verifiers = DefaultVerifiers
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	return o
}

// item is one movement on its way.
type item struct {
	oldSeq     uint64
	store, key string
	digest     string
	part       int
	msg        *nats.Msg
	fut        jetstream.PubAckFuture
	err        error // the publish failed before it was sent
	tries      int
	sent       time.Time // when it was last published
}

// Run migrates every movement the old stream holds up to its last sequence
// when Run begins. The summary is returned whatever happened; err is set
// when the run could not go on (a stream missing, central gone), not for
// conflicts or failures of single movements (see Summary.OK).
func Run(ctx context.Context, nc *nats.Conn, o Options) (*Summary, error) {
	o = o.withDefaults()
	start := time.Now()
	sum := &Summary{From: o.From, Partitions: o.Partitions, Conflicts: []Conflict{}, Failures: []Failure{}, PerPartition: make([]uint64, max(o.Partitions, 0))}
	defer func() {
		sum.Seconds = time.Since(start).Seconds()
		if sum.Seconds > 0 {
			sum.RecordsPerSecond = float64(sum.Migrated+sum.Already) / sum.Seconds
		}
	}()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(o.InFlight), jetstream.WithPublishAsyncTimeout(o.Timeout),
		jetstream.WithDefaultTimeout(o.Timeout))
	if err != nil {
		return sum, err
	}
	info, err := Check(ctx, js, o)
	if err != nil {
		return sum, denied(nc, err)
	}
	sum.Total = info.State.Msgs
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return sum, nil
	}
	m := &migration{nc: nc, js: js, o: o, sum: sum, verify: make(chan struct{}, o.Verifiers), wait: wait}

	// The reader publishes; the settler takes the acknowledgements in
	// order. The channel bounds what is in the air.
	flights := make(chan *item, o.InFlight)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var readErr error
	go func() {
		defer close(flights)
		readErr = m.read(rctx, last, flights)
	}()
	settleErr := m.settle(rctx, flights)
	if settleErr != nil {
		cancel()
		for range flights { // let the reader end
		}
	}
	m.wg.Wait()
	m.finish()
	if settleErr != nil {
		return sum, denied(nc, settleErr)
	}
	return sum, denied(nc, readErr)
}

// denied adds the connection's last permissions violation to err: a
// request the server did not let through is otherwise only a timeout.
func denied(nc *nats.Conn, err error) error {
	if err == nil {
		return nil
	}
	if last := nc.LastError(); last != nil && strings.Contains(strings.ToLower(last.Error()), "permissions violation") {
		return fmt.Errorf("%w (%v: the identity needs migrate.Grants)", err, last)
	}
	return err
}

// migration is one run's state.
type migration struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	o   Options
	sum *Summary

	verify chan struct{} // bounds the direct gets
	wg     stdsync.WaitGroup

	mu       stdsync.Mutex // guards sum's lists and counters below
	done     atomic.Uint64
	progress stdsync.Mutex

	// wait sleeps d or until ctx ends (a test records the waits).
	wait func(ctx context.Context, d time.Duration) error
}

func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// read walks the old stream with an ordered consumer up to sequence last
// and publishes each movement to its partition.
func (m *migration) read(ctx context.Context, last uint64, out chan<- *item) error {
	s, err := m.js.Stream(ctx, m.o.From)
	if err != nil {
		return err
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return fmt.Errorf("migrate: read %s: %w", m.o.From, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(min(m.o.InFlight, 1000)))
	if err != nil {
		return fmt.Errorf("migrate: read %s: %w", m.o.From, err)
	}
	defer it.Stop()
	var seen uint64
	// The ordered consumer recreates itself after a leader change; a
	// stream that still holds unread movements but delivers none for
	// readIdle (six request timeouts) ends the run instead of waiting
	// for ever.
	const poll = 2 * time.Second
	readIdle := 6 * m.o.Timeout
	var idle time.Duration
	for {
		msg, err := it.Next(jetstream.NextMaxWait(poll))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
				// Nothing more came: done when what is left up to last
				// has expired (max_age) since the run began.
				info, ierr := streamInfo(ctx, m.js, m.o.From, m.o.Timeout)
				if ierr != nil {
					return fmt.Errorf("migrate: read %s: %w", m.o.From, ierr)
				}
				if info.State.Msgs == 0 || info.State.FirstSeq > last || info.State.LastSeq <= seen {
					return nil
				}
				if idle += poll; idle >= readIdle {
					return fmt.Errorf("migrate: read %s: nothing delivered for %s after sequence %d, up to %d remain", m.o.From, idle, seen, last)
				}
				continue
			}
			return fmt.Errorf("migrate: read %s: %w", m.o.From, err)
		}
		idle = 0
		md, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("migrate: read %s: %w", m.o.From, err)
		}
		seen = md.Sequence.Stream
		if seen > last {
			return nil
		}
		m.mu.Lock()
		m.sum.Read++
		m.mu.Unlock()
		if mv := m.prepare(msg, seen); mv == nil {
			m.mu.Lock()
			m.sum.Skipped++
			m.mu.Unlock()
			m.tick()
		} else {
			m.publish(mv)
			select {
			case out <- mv:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// Nothing pending after this one: what was left up to last has
		// expired since the run began.
		if seen >= last || md.NumPending == 0 {
			return nil
		}
	}
}

// prepare builds the partition's message of a movement read from the old
// stream; nil when it is not a movement.
func (m *migration) prepare(msg jetstream.Msg, seq uint64) *item {
	rest, ok := strings.CutPrefix(msg.Subject(), central.MovementPrefix)
	if !ok {
		return nil
	}
	store, key, ok := strings.Cut(rest, ".")
	h := msg.Headers()
	digest := central.DigestOf(h)
	if !ok || store == "" || key == "" || strings.Contains(key, ".") || digest == "" || h.Get(central.HeaderMsgID) == "" {
		return nil
	}
	p := central.Partition(store, m.o.Partitions)
	out := nats.NewMsg(central.PartitionSubject(p, m.o.Partitions, store, key))
	for name, vs := range h {
		if name == central.HeaderMsgID || strings.HasPrefix(name, "Rx-") {
			out.Header[name] = append([]string(nil), vs...)
		}
	}
	out.Header.Set(central.HeaderExpectLast, "0")
	if out.Header.Get(central.HeaderMigratedFrom) == "" {
		out.Header.Set(central.HeaderMigratedFrom, m.o.From)
	}
	out.Header.Set(jetstream.ExpectedStreamHeader, central.MovementStream(p, m.o.Partitions))
	out.Data = msg.Data()
	return &item{oldSeq: seq, store: store, key: key, digest: digest, part: p, msg: out}
}

func (m *migration) publish(it *item) {
	it.tries++
	it.sent = time.Now()
	it.fut, it.err = m.js.PublishMsgAsync(it.msg, jetstream.WithRetryAttempts(0), jetstream.WithStallWait(m.o.Timeout))
}

// settle takes the publishes in order and judges their answers. It
// returns an error only when the run cannot go on.
func (m *migration) settle(ctx context.Context, in <-chan *item) error {
	for it := range in {
		if err := m.judge(ctx, it); err != nil {
			return err
		}
	}
	return nil
}

// judge waits for one publish's answer.
func (m *migration) judge(ctx context.Context, it *item) error {
	for {
		err := it.err
		var ack *jetstream.PubAck
		if err == nil {
			select {
			case ack = <-it.fut.Ok():
			case err = <-it.fut.Err():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		switch kind := answer(ack, err); kind {
		case stored:
			m.count(it, func(s *Summary) { s.Migrated++ })
			return nil
		case taken:
			m.check(ctx, it)
			return nil
		case transient:
			if it.tries <= retries {
				// The backoff counts from when the movement was sent, not
				// from when the settler reached it: the movements a
				// leader change failed together wait out one backoff
				// together, instead of one after another (which, with
				// thousands in flight, took minutes), and a publish
				// that timed out has waited already.
				if d := time.Until(it.sent.Add(backoff(it.tries))); d > 0 {
					if err := m.wait(ctx, d); err != nil {
						return err
					}
				}
				m.publish(it)
				continue
			}
			m.fail(it, err.Error())
			return nil
		default: // fatal
			return fmt.Errorf("migrate: publish to %s: %w", central.MovementStream(it.part, m.o.Partitions), err)
		}
	}
}

// backoff is the pause before a movement's try number tries+1.
func backoff(tries int) time.Duration { return time.Duration(tries) * 200 * time.Millisecond }

// Kinds of answer to a republished movement.
const (
	stored    = iota
	taken     // the partition holds the key (or the id): compare digests
	transient // try again
	fatal     // the run cannot go on
)

// answer sorts central's answer to one publish.
func answer(ack *jetstream.PubAck, err error) int {
	if err == nil {
		if ack.Duplicate {
			return taken
		}
		return stored
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch {
		case api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
			return taken
		case api.ErrorCode == 10077 && strings.Contains(api.Description, "maximum messages per subject exceeded"):
			return taken
		case api.ErrorCode == jetstream.JSErrCodeStreamNotFound, api.ErrorCode == 10077,
			api.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabled, api.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabledForAccount:
			return fatal
		}
		return transient
	}
	switch {
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrPermissionViolation), errors.Is(err, nats.ErrMaxPayload):
		return fatal
	}
	return transient
}

// check reads the partition's copy of a taken key in the background
// (bounded by Verifiers) and compares digests.
func (m *migration) check(ctx context.Context, it *item) {
	select {
	case m.verify <- struct{}{}:
	case <-ctx.Done():
		m.fail(it, "not checked: "+ctx.Err().Error())
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer func() { <-m.verify }()
		digest, seq, err := m.lastDigest(ctx, it)
		switch {
		case err != nil:
			m.fail(it, "central reported the key stored; reading its copy: "+err.Error())
		case digest == it.digest:
			m.count(it, func(s *Summary) { s.Already++ })
		default:
			m.count(it, func(s *Summary) {
				s.Conflicts = append(s.Conflicts, Conflict{Store: it.store, Key: it.key, Stream: central.MovementStream(it.part, m.o.Partitions),
					OldSeq: it.oldSeq, PartitionSeq: seq})
			})
		}
	}()
}

var errNotStored = errors.New("no message stored for the key")

// lastDigest direct-gets the partition's message of the item's key.
func (m *migration) lastDigest(ctx context.Context, it *item) (string, uint64, error) {
	var last error
	for range retries {
		rctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
		resp, err := m.nc.RequestWithContext(rctx, central.PartitionDirectGetSubject(it.part, m.o.Partitions, it.store, it.key), nil)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return "", 0, err
			}
			last = err
			continue
		}
		if st := resp.Header.Get("Status"); st != "" {
			if st == "404" {
				return "", 0, errNotStored
			}
			return "", 0, fmt.Errorf("direct get: status %s %s", st, resp.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(resp.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return "", 0, errors.New("direct get: no stream sequence")
		}
		return central.DigestOf(resp.Header), seq, nil
	}
	return "", 0, last
}

func (m *migration) count(it *item, f func(*Summary)) {
	m.mu.Lock()
	f(m.sum)
	m.sum.PerPartition[it.part]++
	m.mu.Unlock()
	m.tick()
}

func (m *migration) fail(it *item, reason string) {
	m.mu.Lock()
	m.sum.Failures = append(m.sum.Failures, Failure{Store: it.store, Key: it.key, OldSeq: it.oldSeq, Reason: reason})
	m.mu.Unlock()
	m.tick()
}

func (m *migration) tick() {
	n := m.done.Add(1)
	if m.o.Progress != nil {
		m.progress.Lock()
		m.o.Progress(n, m.sum.Total)
		m.progress.Unlock()
	}
}

// finish sorts what concurrent checks appended, so a summary reads the same
// on every run.
func (m *migration) finish() {
	m.mu.Lock()
	defer m.mu.Unlock()
	slices.SortFunc(m.sum.Conflicts, func(a, b Conflict) int { return cmp.Compare(a.OldSeq, b.OldSeq) })
	slices.SortFunc(m.sum.Failures, func(a, b Failure) int { return cmp.Compare(a.OldSeq, b.OldSeq) })
}
