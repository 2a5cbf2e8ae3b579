package audit_test

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/provision"
)

// TestSelector: whatever the records and their order, the newest
// checkpoint of each log is the newest a roster key of its store signed;
// a record's id, subject or claimed size chooses nothing.
func TestSelector(t *testing.T) {
	key := func(store string) (note.Signer, string) {
		skey, vkey, err := ledger.GenerateKey(rand.Reader, store)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := note.NewSigner(skey)
		return s, vkey
	}
	a, av := key("S0042")
	b, bv := key("S0043")
	roster, err := provision.ParseRoster(strings.NewReader("S0042 " + av + "\nS0043 " + bv + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	const logA, logB = "0123456789abcdef", "fedcba9876543210"
	type rec struct {
		store, id string
		body      []byte
		ok        bool
	}
	signed := func(s note.Signer, store, log string, first uint64, size int64, idSize int64) rec {
		c := ledger.Checkpoint{Store: store, Log: log, Size: size, First: first, Root: sha256.Sum256([]byte(fmt.Sprint(log, size))), Time: time.Unix(1e9+size, 0).UTC()}
		n, err := note.Sign(&note.Note{Text: c.Text()}, s)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := ledger.Message{Note: string(n)}.Marshal()
		return rec{"S0042", ledger.CheckpointMsgID(ledger.CheckpointToken(log, idSize), body), body, s == a && store == "S0042"}
	}
	recs := []rec{
		signed(a, "S0042", logA, 1, 20, 20),
		signed(b, "S0042", logA, 1, 1<<40, 1<<40), // another store's key
		signed(a, "S0042", logA, 1, 60, 60),
		signed(a, "S0042", logA, 1, 40, 1<<41), // misnamed: still the checkpoint of size 40
		{"S0042", ledger.CheckpointToken(logA, 1<<42), []byte(`{"note":"x"}`), false},
		signed(a, "S0042", logB, 61, 5, 5),  // the store's next log
		signed(a, "S0043", logA, 1, 99, 99), // S0043's checkpoint text on S0042's subjects
		{"S0042", "cp-nonsense", []byte(`{}`), false},
	}
	// Every order of a few rotations: the selection does not depend on it.
	for rot := range recs {
		sel := audit.NewSelector(roster)
		refused := 0
		for i := range recs {
			r := recs[(i+rot)%len(recs)]
			_, err := sel.Add(r.store, r.id, r.body)
			if (err == nil) != r.ok {
				t.Fatalf("rotation %d: record %q: error %v, want ok %v", rot, r.id, err, r.ok)
			}
			if err != nil {
				refused++
				if !errors.Is(err, ledger.ErrNotSigned) && !errors.Is(err, ledger.ErrMalformed) && !errors.Is(err, ledger.ErrNotCheckpointID) {
					t.Errorf("rotation %d: %v is none of OpenMessage's errors", rot, err)
				}
			}
		}
		logs := sel.Logs("S0042")
		if refused != 4 || len(logs) != 2 || logs[0].Log != logA || logs[0].Size != 60 || logs[1].Log != logB || logs[1].Size != 5 {
			t.Fatalf("rotation %d: %d refused, logs %+v", rot, refused, logs)
		}
		for _, tc := range []struct {
			seq  uint64
			log  string
			size int64
			ok   bool
		}{{1, logA, 60, true}, {60, logA, 60, true}, {61, logB, 5, true}, {65, logB, 5, true}, {66, logB, 5, false}} {
			c, ok := sel.Covering("S0042", tc.seq)
			if ok != tc.ok || c.Log != tc.log || c.Size != tc.size {
				t.Errorf("rotation %d: Covering(%d) = %s/%d %v, want %s/%d %v", rot, tc.seq, c.Log, c.Size, ok, tc.log, tc.size, tc.ok)
			}
		}
		if len(sel.Logs("S0043")) != 0 {
			t.Errorf("rotation %d: S0043 has logs from records on S0042's subjects", rot)
		}
	}
}
