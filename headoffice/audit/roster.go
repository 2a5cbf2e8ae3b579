package audit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/ledger"
)

// Roster is each store's verifier keys (several while a key is rotated).
type Roster map[string][]note.Verifier

// MaxRosterLine bounds a roster line.
const MaxRosterLine = 4096

// ParseRoster reads the roster the server config is generated from: one
// store a line, "S0042" or "S0042 <verifier key>", a store on several
// lines for several keys; blank lines and lines starting with # are
// skipped. A key must be a note verifier key named for its store
// (ledger.KeyName). Errors name the line, not its content.
func ParseRoster(r io.Reader) (Roster, error) {
	out := Roster{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), MaxRosterLine)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		store := fields[0]
		if !central.ValidStoreID(store) || len(fields) > 2 {
			return nil, fmt.Errorf("audit: roster line %d: not \"STORE [KEY]\"", n)
		}
		if _, ok := out[store]; !ok {
			out[store] = nil
		}
		if len(fields) == 1 {
			continue
		}
		v, err := note.NewVerifier(fields[1])
		if err != nil {
			return nil, fmt.Errorf("audit: roster line %d: the key is not a note verifier key", n)
		}
		if v.Name() != ledger.KeyName(store) {
			return nil, fmt.Errorf("audit: roster line %d: the key is named %q, not %q", n, v.Name(), ledger.KeyName(store))
		}
		dup := false
		for _, w := range out[store] {
			dup = dup || w.KeyHash() == v.KeyHash()
		}
		if !dup {
			out[store] = append(out[store], v)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("audit: roster: a line over %d bytes", MaxRosterLine)
		}
		return nil, fmt.Errorf("audit: roster: %w", err)
	}
	return out, nil
}

// verifiers are the keys that may sign for store, and the witness's when
// there is one.
func (r Roster) verifiers(store string, witness note.Verifier) note.Verifiers {
	vs := append([]note.Verifier(nil), r[store]...)
	if witness != nil {
		vs = append(vs, witness)
	}
	return note.VerifierList(vs...)
}

// hasSig says whether n carries a verified signature by v.
func hasSig(n *note.Note, v note.Verifier) bool {
	for _, s := range n.Sigs {
		if s.Name == v.Name() && s.Hash == v.KeyHash() {
			return true
		}
	}
	return false
}
