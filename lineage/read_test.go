package lineage_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/lineage"
	"github.com/rxedge/agent/notary"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/testkit/natstest"
)

// storeKey makes a signing key of store: the signer and its verifier key.
func storeKey(t *testing.T, store string) (note.Signer, string) {
	t.Helper()
	skey, vkey, err := ledger.GenerateKey(rand.Reader, store)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return s, vkey
}

// checkpointMsg is the message notary publishes for a checkpoint of log at
// size covering the sequences first.., signed by s, with Rx-Seq lastSeq
// and Rx-File file.
func checkpointMsg(t *testing.T, s note.Signer, store, log string, size int64, first, lastSeq uint64, file string) *nats.Msg {
	t.Helper()
	signed, err := ledger.Sign(ledger.Checkpoint{Store: store, Log: log, Size: size, First: first, Time: time.Now()}, s)
	if err != nil {
		t.Fatal(err)
	}
	body, err := ledger.Message{Note: string(signed)}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	m := notary.Msg(store, queue.StoredCheckpoint{Log: log, Size: size, Message: body}, lastSeq, file)
	// A test may publish it under another store's subject.
	m.Subject = central.Subject(store, ledger.CheckpointToken(log, size))
	return m
}

// movementMsg is the message the agent sends for movement id under
// sequence seq of file.
func movementMsg(t *testing.T, id string, seq uint64, file string) *nats.Msg {
	t.Helper()
	p := prepared(t, id)
	return central.Message{Store: store, Key: p.KeyString(), Digest: hex.EncodeToString(p.Digest[:]), Seq: seq, EnqueuedAt: time.Now(),
		Payload: p.Payload, File: central.FileLineage{ID: file}}.Msg()
}

// withHeader is m with header k set to vs (none: removed).
func withHeader(m *nats.Msg, k string, vs ...string) *nats.Msg {
	if len(vs) == 0 {
		m.Header.Del(k)
	} else {
		m.Header[k] = vs
	}
	return m
}

// TestClassifyLast stores each kind of record on a real server, reads it
// back as a direct get answers the agent, and checks what the store
// takes from it: its own movements and checkpoints, and nothing from a
// record it did not write as it writes its own.
func TestClassifyLast(t *testing.T) {
	srv := natstest.StartHub(t)
	nc := natstest.Connect(t, srv.URL())
	file := uuid.NewString()
	signer, vkey := storeKey(t, store)
	sum, _ := json.Marshal(command.Summary{StoreID: store, HighestSeq: 41, FileID: file})
	if _, err := nc.Request(central.FleetSubject(store), sum, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	for i, tc := range classifyCases(t, file, signer) {
		t.Run(tc.name, func(t *testing.T) {
			var subject string
			if tc.msg != nil {
				m := tc.msg()
				if _, err := nc.RequestMsg(m, 2*time.Second); err != nil {
					t.Fatal(err)
				}
				subject = m.Subject
			} else {
				subject = central.Subject(store, fmt.Sprintf("reply-%d", i))
				if err := nc.PublishRequest(tc.reply, subject, nil); err != nil {
					t.Fatal(err)
				}
			}
			m := storedAt(t, nc, subject)
			c := lineage.ClassifyLast(m, store, vkey)
			if c.Where != lineage.WhereLast || c.Found != tc.found || c.Skip != tc.skip || c.Seq != tc.seq || c.File != tc.file || c.Signed != tc.sign || c.Stream != central.StreamName || c.StreamSeq == 0 {
				t.Fatalf("got %+v, want found %s skip %q seq %d file %q signed %v", c, tc.found, tc.skip, tc.seq, tc.file, tc.sign)
			}
		})
	}
	if c := lineage.ClassifyLast(nil, store, vkey); c.Found != lineage.FoundNone {
		t.Fatalf("no message: %+v", c)
	}
}

// classifyCase is a record on the store's subject and what the store
// takes from it.
type classifyCase struct {
	name  string
	msg   func() *nats.Msg // published as it is
	reply string           // or: a JetStream request whose answer is stored (reply to the store's subject)
	found lineage.Found
	skip  string
	seq   uint64
	file  string
	sign  bool
}

// classifyCases are TestClassifyLast's records: movements of file and
// checkpoints signed by signer (the store's key) are the store's own.
func classifyCases(t *testing.T, file string, signer note.Signer) []classifyCase {
	otherSigner, _ := storeKey(t, store)
	log := "0123456789abcdef"
	keyOf := func(id string) string { p := prepared(t, id); return p.KeyString() }
	fullForm := func(id string, seq uint64) *nats.Msg {
		p := prepared(t, id)
		return natstest.FullForm(central.Message{Store: store, Key: p.KeyString(), Digest: hex.EncodeToString(p.Digest[:]), Seq: seq,
			EnqueuedAt: time.Now(), Payload: p.Payload, File: central.FileLineage{ID: file}}, "")
	}
	return []classifyCase{
		{name: "movement", msg: func() *nats.Msg { return movementMsg(t, "a", 41, file) }, found: lineage.FoundMovement, seq: 41, file: file},
		{name: "full form", msg: func() *nats.Msg { return fullForm("b", 42) }, found: lineage.FoundMovement, seq: 42, file: file},
		{name: "before file identities", msg: func() *nats.Msg { return withHeader(movementMsg(t, "c", 43, ""), central.HeaderFile) }, found: lineage.FoundMovement, seq: 43},
		{name: "at MaxSeq", msg: func() *nats.Msg { return movementMsg(t, "d", queue.MaxSeq, file) }, found: lineage.FoundMovement, seq: queue.MaxSeq, file: file},
		{name: "checkpoint signed by the store", msg: func() *nats.Msg { return checkpointMsg(t, signer, store, log, 10, 1, 12, file) }, found: lineage.FoundCheckpoint, seq: 12, file: file, sign: true},
		{name: "checkpoint signed by another key", msg: func() *nats.Msg { return checkpointMsg(t, otherSigner, store, log, 11, 1, 12, file) }, found: lineage.FoundCheckpoint, seq: 12, file: file},

		{name: "stream info answer", reply: "$JS.API.STREAM.INFO." + central.StreamName, found: lineage.FoundSkipped, skip: lineage.SkipNoSeq},
		{name: "a fleet summary's direct get answer", reply: central.FleetDirectGetSubject(store), found: lineage.FoundSkipped, skip: lineage.SkipReflected},
		{name: "stored status", msg: func() *nats.Msg { return withHeader(movementMsg(t, "e", 44, file), "Status", "404") }, found: lineage.FoundSkipped, skip: lineage.SkipStatus},
		{name: "no Rx-Seq", msg: func() *nats.Msg { return withHeader(movementMsg(t, "f", 45, file), central.HeaderSeq) }, found: lineage.FoundSkipped, skip: lineage.SkipNoSeq},
		{name: "two Rx-Seq", msg: func() *nats.Msg { return withHeader(movementMsg(t, "g", 45, file), central.HeaderSeq, "45", "46") }, found: lineage.FoundSkipped, skip: lineage.SkipNoSeq},
		{name: "Rx-Seq not canonical", msg: func() *nats.Msg { return withHeader(movementMsg(t, "h", 45, file), central.HeaderSeq, "045") }, found: lineage.FoundSkipped, skip: lineage.SkipNoSeq},
		{name: "Rx-Seq zero", msg: func() *nats.Msg { return withHeader(movementMsg(t, "i", 45, file), central.HeaderSeq, "0") }, found: lineage.FoundSkipped, skip: lineage.SkipNoSeq},
		{name: "Rx-Seq past uint64", msg: func() *nats.Msg {
			return withHeader(movementMsg(t, "j", 45, file), central.HeaderSeq, "18446744073709551616")
		}, found: lineage.FoundSkipped, skip: lineage.SkipNoSeq},
		{name: "Rx-Seq 2^64-1", msg: func() *nats.Msg { return movementMsg(t, "k", 1<<64-1, file) }, found: lineage.FoundSkipped, skip: lineage.SkipSeqRange},
		{name: "Rx-Seq above MaxSeq", msg: func() *nats.Msg { return movementMsg(t, "l", queue.MaxSeq+1, file) }, found: lineage.FoundSkipped, skip: lineage.SkipSeqRange},
		{name: "digest of another payload", msg: func() *nats.Msg { m := movementMsg(t, "m", 46, file); m.Data = []byte(`{}`); return m }, found: lineage.FoundSkipped, skip: lineage.SkipInconsistent},
		{name: "message id of another key", msg: func() *nats.Msg {
			m := movementMsg(t, "n", 46, file)
			return withHeader(m, central.HeaderMsgID, keyOf("o")+m.Header.Get(central.HeaderMsgID)[32:])
		}, found: lineage.FoundSkipped, skip: lineage.SkipInconsistent},
		{name: "token not a key", msg: func() *nats.Msg {
			m := movementMsg(t, "p", 46, file)
			m.Subject = central.Subject(store, "x")
			return m
		}, found: lineage.FoundSkipped, skip: lineage.SkipInconsistent},
		{name: "file not an identity", msg: func() *nats.Msg { return movementMsg(t, "q", 46, "Jane Doe 1970-01-01") }, found: lineage.FoundSkipped, skip: lineage.SkipInconsistent},
		{name: "two files", msg: func() *nats.Msg {
			return withHeader(movementMsg(t, "r", 46, file), central.HeaderFile, file, uuid.NewString())
		}, found: lineage.FoundSkipped, skip: lineage.SkipInconsistent},
		{name: "another store's header", msg: func() *nats.Msg { return withHeader(fullForm("s", 46), central.HeaderStore, "S0043") }, found: lineage.FoundSkipped, skip: lineage.SkipInconsistent},
		{name: "central's headers in the record", msg: func() *nats.Msg { return withHeader(movementMsg(t, "t", 46, file), "Nats-Stream", central.StreamName) }, found: lineage.FoundSkipped, skip: lineage.SkipReflected},
		{name: "checkpoint of another store", msg: func() *nats.Msg {
			s, _ := storeKey(t, "S0043")
			m := checkpointMsg(t, s, "S0043", log, 12, 1, 12, file)
			m.Subject = central.Subject(store, ledger.CheckpointToken(log, 12))
			return withHeader(m, central.HeaderStore)
		}, found: lineage.FoundSkipped, skip: lineage.SkipInconsistent},
		{name: "checkpoint under another size", msg: func() *nats.Msg {
			m := checkpointMsg(t, signer, store, log, 13, 1, 20, file)
			m.Subject = central.Subject(store, ledger.CheckpointToken(log, 14))
			return withHeader(m, central.HeaderMsgID, ledger.CheckpointMsgID(ledger.CheckpointToken(log, 14), m.Data))
		}, found: lineage.FoundSkipped, skip: lineage.SkipInconsistent},
		{name: "checkpoint beyond its Rx-Seq", msg: func() *nats.Msg { return checkpointMsg(t, signer, store, log, 15, 1, 14, file) }, found: lineage.FoundSkipped, skip: lineage.SkipInconsistent},
	}
}

// storedAt reads the message central holds on subject, as the agent's
// direct get of its last message answers it, waiting for an answer that
// is stored a moment after the request that caused it.
func storedAt(t *testing.T, nc *nats.Conn, subject string) *nats.Msg {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := nc.Request(central.DirectGetSubject(subject), nil, 2*time.Second)
		if err == nil && m.Header.Get("Nats-Sequence") != "" {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing stored on %s within 10 s: %v", subject, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClassifySummary: the store's own summary is taken, even copied onto
// its own key by a reflection; another store's (written as this store's
// by that store, and copied here by a user of the streams' account), an
// answer of the JetStream API, or one out of range is skipped.
func TestClassifySummary(t *testing.T) {
	srv := natstest.StartHub(t)
	nc := natstest.Connect(t, srv.URL())
	js := natstest.JetStream(t, nc)
	file := uuid.NewString()
	put := func(subject string, s command.Summary) {
		t.Helper()
		b, _ := json.Marshal(s)
		if _, err := js.Publish(t.Context(), subject, b); err != nil {
			t.Fatal(err)
		}
	}
	read := func() lineage.Claim {
		t.Helper()
		m, err := nc.Request(central.FleetDirectGetSubject(store), nil, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return lineage.ClassifySummary(m, store)
	}
	// reflect has the fleet's direct get of from answered onto the store's
	// key, and waits until it is stored there.
	reflect := func(from string) {
		t.Helper()
		before := read().StreamSeq
		if err := nc.PublishRequest(central.FleetDirectGetSubject(from), central.FleetSubject(store), nil); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for read().StreamSeq == before {
			if time.Now().After(deadline) {
				t.Fatal("the reflection was not stored within 10 s")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	put(central.FleetSubject(store), command.Summary{StoreID: store, HighestSeq: 300, FileID: file})
	if c := read(); c.Found != lineage.FoundSummary || c.Seq != 300 || c.File != file || c.Stream != central.FleetStreamName {
		t.Fatalf("own summary: %+v", c)
	}
	reflect(store)
	if c := read(); c.Found != lineage.FoundSummary || c.Seq != 300 || c.File != file {
		t.Fatalf("own summary copied onto its key: %+v", c)
	}
	put(central.FleetSubject("S0043"), command.Summary{StoreID: store, HighestSeq: 1 << 40, FileID: uuid.NewString()})
	reflect("S0043")
	if c := read(); c.Found != lineage.FoundSkipped || c.Skip != lineage.SkipReflected || c.Seq != 0 {
		t.Fatalf("another store's summary copied onto the key: %+v", c)
	}
	for _, tc := range []struct {
		name string
		s    command.Summary
		skip string
	}{
		{"another store's", command.Summary{StoreID: "S0043", HighestSeq: 5}, lineage.SkipNotOwn},
		{"above MaxSeq", command.Summary{StoreID: store, HighestSeq: queue.MaxSeq + 1}, lineage.SkipSeqRange},
		{"file not an identity", command.Summary{StoreID: store, HighestSeq: 5, FileID: "x"}, lineage.SkipInconsistent},
	} {
		put(central.FleetSubject(store), tc.s)
		if c := read(); c.Found != lineage.FoundSkipped || c.Skip != tc.skip {
			t.Errorf("%s: %+v, want skipped as %s", tc.name, c, tc.skip)
		}
	}
	if _, err := js.Publish(t.Context(), central.FleetSubject(store), []byte(`{"type":"io.nats.jetstream.api.v1.stream_info_response"}`)); err != nil {
		t.Fatal(err)
	}
	if c := read(); c.Found != lineage.FoundSkipped || c.Skip != lineage.SkipNotOwn {
		t.Errorf("an API answer: %+v", c)
	}
}
