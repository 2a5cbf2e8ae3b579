package audit

import (
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/headoffice/provision"
)

// verifiers are the keys of roster r that may sign for store, and the
// witness's when there is one. The roster is provision.ParseRoster's, the
// one the server configuration is generated from.
func verifiers(r *provision.Roster, store string, witness note.Verifier) note.Verifiers {
	vs := r.StoreVerifiers(store)
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
