package sink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/central/streams"
)

// VerifyOptions configure Verify.
type VerifyOptions struct {
	Conn      *nats.Conn
	APIPrefix string
	Archives  []string
	// AllowLag does not count archive messages after the stored position
	// as a difference (a check of a sink that is running).
	AllowLag bool
	// Progress, when set, is called now and then with the stream being
	// read and the messages read of it so far and in all.
	Progress func(stream string, done, total uint64)
}

// Verification is what Verify found.
type Verification struct {
	Streams []StreamCheck `json:"streams"`
	Stores  []StoreCheck  `json:"stores"`
	// PayloadMismatches counts rows whose stored payload does not hash to
	// their digest.
	PayloadMismatches uint64 `json:"payload_mismatches"`
	AllowLag          bool   `json:"allow_lag"`
}

// StreamCheck is one archive stream's comparison, message by message.
type StreamCheck struct {
	Name     string `json:"name"`
	FirstSeq uint64 `json:"archive_first_seq"`
	LastSeq  uint64 `json:"archive_last_seq"`
	Position uint64 `json:"position"`
	Checked  uint64 `json:"checked"`
	// Lag is the archive messages after the position.
	Lag uint64 `json:"lag"`
	// Missing are archive messages up to the position with no row.
	Missing uint64 `json:"missing"`
	// Different are rows whose store, key, digest or store sequence is not
	// the archive message's.
	Different uint64 `json:"different"`
	// Extra are rows of archive sequences the archive does not hold,
	// past its first sequence, or after the position.
	Extra uint64 `json:"extra"`
	// Aged are rows older than the archive's first sequence: kept by the
	// database after the archive's retention dropped them.
	Aged uint64 `json:"aged"`
	// RecordedAs is the name the stream's rows are recorded under
	// (archive_stream): its own, or, once it was created again (deleted
	// and recreated by central's administrator) since the sink first read
	// it, "<name>@<its creation time>". Earlier name the rows of the
	// earlier streams of the name, which are not compared.
	RecordedAs string   `json:"recorded_as"`
	Earlier    []string `json:"earlier,omitempty"`
}

// StoreCheck is one store's totals on both sides, for the messages up to
// the stored positions.
type StoreCheck struct {
	Store           string `json:"store"`
	Archived        uint64 `json:"archived"`
	InDatabase      uint64 `json:"in_database"`
	HighestArchived uint64 `json:"highest_seq_archived"`
	HighestInDB     uint64 `json:"highest_seq_in_database"`
	Differences     uint64 `json:"differences"`
}

// OK reports whether the database holds exactly what the archives hold.
func (v *Verification) OK() bool {
	if v.PayloadMismatches > 0 {
		return false
	}
	for _, s := range v.Streams {
		if s.Missing > 0 || s.Different > 0 || s.Extra > 0 || (!v.AllowLag && s.Lag > 0) {
			return false
		}
	}
	for _, s := range v.Stores {
		if s.Differences > 0 || s.Archived != s.InDatabase || s.HighestArchived != s.HighestInDB {
			return false
		}
	}
	return true
}

type dbRow struct {
	archiveSeq uint64
	kind       string
	store, key string
	digest     string
	seq        uint64
}

const verifyRows = `SELECT archive_seq, kind, store_id, key, digest, seq FROM (
	SELECT archive_seq, 'row' AS kind, store_id, key::text, digest::text, seq FROM movements WHERE archive_stream = $1
	UNION ALL SELECT archive_seq, 'repeat', store_id, key::text, digest::text, seq FROM movement_repeats WHERE archive_stream = $1
	UNION ALL SELECT archive_seq, 'conflict', store_id, key::text, digest::text, seq FROM movement_conflicts WHERE archive_stream = $1
	UNION ALL SELECT archive_seq, 'reject', store_id, '', '', 0 FROM sink_rejects WHERE archive_stream = $1
) r ORDER BY archive_seq`

// Verify compares the database with the archives, message by message: each
// archive message up to the stored position must have its one row, with
// the store, key, digest and store sequence of its headers; per store, the
// counts and highest sequences must agree; and every stored payload must
// hash to its digest.
func Verify(ctx context.Context, conn *pgx.Conn, o VerifyOptions) (*Verification, error) {
	v := &Verification{AllowLag: o.AllowLag}
	if err := CheckSchema(ctx, conn); err != nil {
		return nil, err
	}
	js, err := jetStream(o.Conn, o.APIPrefix)
	if err != nil {
		return nil, err
	}
	names, err := streams.Archives(ctx, js, o.Archives)
	if err != nil {
		return nil, err
	}
	stores := map[string]*StoreCheck{}
	store := func(id string) *StoreCheck {
		s := stores[id]
		if s == nil {
			s = &StoreCheck{Store: id}
			stores[id] = s
		}
		return s
	}
	for _, name := range names {
		sc, err := verifyStream(ctx, conn, js, name, store, o.Progress)
		if err != nil {
			return nil, err
		}
		v.Streams = append(v.Streams, sc)
	}
	// A store's highest sequence in the database, over every archive
	// stream it was written from.
	q, err := conn.Query(ctx, `SELECT store_id, count(*), max(seq) FROM (
		SELECT store_id, seq FROM movements UNION ALL SELECT store_id, seq FROM movement_repeats
		UNION ALL SELECT store_id, seq FROM movement_conflicts) r GROUP BY store_id`)
	if err != nil {
		return nil, fmt.Errorf("sink: verify: %w", err)
	}
	for q.Next() {
		var id string
		var n, hi int64
		if err := q.Scan(&id, &n, &hi); err != nil {
			q.Close()
			return nil, fmt.Errorf("sink: verify: %w", err)
		}
		store(id).HighestInDB = uint64(hi)
	}
	q.Close()
	if err := q.Err(); err != nil {
		return nil, fmt.Errorf("sink: verify: %w", err)
	}
	var bad int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM movements WHERE encode(sha256(convert_to(payload, 'UTF8')), 'hex') <> digest`).Scan(&bad); err != nil {
		return nil, fmt.Errorf("sink: verify payloads: %w", err)
	}
	v.PayloadMismatches = uint64(bad)
	for _, s := range stores {
		v.Stores = append(v.Stores, *s)
	}
	slices.SortFunc(v.Stores, func(a, b StoreCheck) int { return strings.Compare(a.Store, b.Store) })
	return v, nil
}

// verifyStream compares one archive stream with the database's rows of
// it, counting each archive message for its store.
func verifyStream(ctx context.Context, conn *pgx.Conn, js jetstream.JetStream, name string, store func(string) *StoreCheck, progress func(string, uint64, uint64)) (StreamCheck, error) {
	sc := StreamCheck{Name: name}
	st, err := js.Stream(ctx, name)
	if err != nil {
		return sc, fmt.Errorf("sink: verify: stream %s: %w", name, err)
	}
	state := st.CachedInfo().State
	if err := sc.readPosition(ctx, conn, state); err != nil {
		return sc, err
	}

	// The database's rows of the stream, in archive order, walked beside
	// the archive's messages.
	rows, err := conn.Query(ctx, verifyRows, sc.RecordedAs)
	if err != nil {
		return sc, fmt.Errorf("sink: verify %s: %w", name, err)
	}
	defer rows.Close()
	w := &rowWalk{rows: rows}
	w.next()
	for w.have && w.cur.archiveSeq < sc.FirstSeq {
		sc.Aged++
		w.next()
	}
	if state.Msgs > 0 && sc.Position >= sc.FirstSeq {
		if err := sc.walkArchive(ctx, st, w, store, progress); err != nil {
			return sc, err
		}
	}
	for w.have {
		sc.Extra++
		w.next()
	}
	if w.err != nil {
		return sc, fmt.Errorf("sink: verify %s: %w", name, w.err)
	}
	return sc, nil
}

// readPosition sets the stream's bounds from state, its stored position
// and the archive messages after it.
func (sc *StreamCheck) readPosition(ctx context.Context, conn *pgx.Conn, state jetstream.StreamState) error {
	sc.FirstSeq, sc.LastSeq = state.FirstSeq, state.LastSeq
	var pos int64
	sc.RecordedAs = sc.Name
	err := conn.QueryRow(ctx, `SELECT r.archive_stream, r.last_seq FROM sink_positions s
		JOIN sink_positions r ON r.archive_stream = coalesce(s.current_as, s.archive_stream)
		WHERE s.archive_stream = $1`, sc.Name).Scan(&sc.RecordedAs, &pos)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("sink: verify: position of %s: %w", sc.Name, err)
	}
	sc.Position = uint64(pos)
	rows, err := conn.Query(ctx, `SELECT archive_stream FROM sink_positions
		WHERE (archive_stream = $1 OR left(archive_stream, length($1) + 1) = $1 || '@') AND archive_stream <> $2
		ORDER BY archive_stream`, sc.Name, sc.RecordedAs)
	if err != nil {
		return fmt.Errorf("sink: verify: earlier streams of %s: %w", sc.Name, err)
	}
	if sc.Earlier, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return fmt.Errorf("sink: verify: earlier streams of %s: %w", sc.Name, err)
	}
	if sc.LastSeq > sc.Position {
		sc.Lag = sc.LastSeq - max(sc.Position, sc.FirstSeq-1)
		if state.Msgs == 0 {
			sc.Lag = 0
		}
	}
	return nil
}

// rowWalk walks the database's rows of a stream: cur is the current row
// when have is set; err is the first error of the rows.
type rowWalk struct {
	rows pgx.Rows
	cur  dbRow
	have bool
	err  error
}

// next moves to the next row, if any.
func (w *rowWalk) next() {
	w.have = false
	if !w.rows.Next() {
		w.err = w.rows.Err()
		return
	}
	var as, seq int64
	if err := w.rows.Scan(&as, &w.cur.kind, &w.cur.store, &w.cur.key, &w.cur.digest, &seq); err != nil {
		w.err = err
		return
	}
	w.cur.archiveSeq, w.cur.seq, w.have = uint64(as), uint64(seq), true
}

// walkArchive reads the stream's messages up to the stored position and
// compares each with its row.
func (sc *StreamCheck) walkArchive(ctx context.Context, st jetstream.Stream, w *rowWalk, store func(string) *StoreCheck, progress func(string, uint64, uint64)) error {
	cfg := jetstream.OrderedConsumerConfig{HeadersOnly: true, InactiveThreshold: time.Minute}
	cons, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("sink: verify: read %s: %w", sc.Name, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		return fmt.Errorf("sink: verify: read %s: %w", sc.Name, err)
	}
	defer it.Stop()
	end := min(sc.Position, sc.LastSeq)
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("sink: verify: read %s after %d messages: %w", sc.Name, sc.Checked, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		s := meta.Sequence.Stream
		if s > end {
			break
		}
		sc.Checked++
		if progress != nil && sc.Checked%8192 == 0 {
			progress(sc.Name, sc.Checked, end-sc.FirstSeq+1)
		}
		sc.compare(m, s, w, store)
		if s == end {
			break
		}
	}
	if progress != nil {
		progress(sc.Name, sc.Checked, sc.Checked)
	}
	return nil
}

// compare checks the archive message m, at stream sequence s, against its
// row, counting the rows before it as extra and the message as missing
// when it has no row.
func (sc *StreamCheck) compare(m jetstream.Msg, s uint64, w *rowWalk, store func(string) *StoreCheck) {
	for w.have && w.cur.archiveSeq < s {
		sc.Extra++
		w.next()
	}
	h := m.Headers()
	if ledger.IsCheckpointToken(h.Get(central.HeaderMsgID)) {
		return // a store's checkpoint: the database holds no row for it
	}
	id, _ := strings.CutPrefix(m.Subject(), central.ArchivePrefix)
	seq, _ := strconv.ParseUint(h.Get(central.HeaderSeq), 10, 64)
	key, digest := central.KeyOfMsgID(h.Get(central.HeaderMsgID)), central.DigestOf(h)
	if !central.ValidStoreID(id) {
		id = ""
	}
	sk := store(id)
	sk.Archived++
	if !w.have || w.cur.archiveSeq != s {
		sc.Missing++
		sk.Differences++
		return
	}
	r := w.cur
	w.next()
	sk.InDatabase++
	ok := r.store == id
	if r.kind != "reject" {
		ok = ok && r.key == key && r.digest == digest && r.seq == seq
		if seq > sk.HighestArchived {
			sk.HighestArchived = seq
		}
	}
	if !ok {
		sc.Different++
		sk.Differences++
	}
}

// WriteText prints v for a person: a line per archive stream, the stores
// with a difference, and a total.
func (v *Verification) WriteText(w io.Writer) error {
	for _, st := range v.Streams {
		fmt.Fprintf(w, "%s: archive %d..%d, position %d, checked %d, lag %d, missing %d, different %d, extra %d, older than the archive %d\n",
			st.Name, st.FirstSeq, st.LastSeq, st.Position, st.Checked, st.Lag, st.Missing, st.Different, st.Extra, st.Aged)
		if len(st.Earlier) > 0 {
			fmt.Fprintf(w, "%s: created again %d time(s) since the sink first read it (deleted and recreated by central's administrator): "+
				"the sink read it from its start, its rows recorded as %s; the earlier streams' rows are kept as %s\n",
				st.Name, len(st.Earlier), st.RecordedAs, strings.Join(st.Earlier, ", "))
		}
	}
	bad := 0
	for _, st := range v.Stores {
		if st.Differences > 0 || st.Archived != st.InDatabase || st.HighestArchived != st.HighestInDB {
			bad++
			fmt.Fprintf(w, "store %s: archived %d, in the database %d, highest sequence %d archived, %d in the database, %d difference(s)\n",
				st.Store, st.Archived, st.InDatabase, st.HighestArchived, st.HighestInDB, st.Differences)
		}
	}
	_, err := fmt.Fprintf(w, "%d store(s), %d with a difference; %d payload(s) not matching their digest\n", len(v.Stores), bad, v.PayloadMismatches)
	return err
}
