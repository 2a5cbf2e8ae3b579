package console

import (
	"context"

	"github.com/nats-io/nats.go"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/provision"
)

// AuditProver makes inspectors' proofs with headoffice/audit's Prove
// over central's archives, as `hq prove` does: the checkpoint a proof
// rests on is one a roster key of the store signed (and, with Witness,
// one the witness countersigned, when there is one).
type AuditProver struct {
	Conn *nats.Conn
	// APIPrefix is the identity's JetStream API prefix (the auditor's
	// central.AuditAPIPrefix); "" for the default.
	APIPrefix string
	// Archives are the archive streams; nil for a one-partition central.
	Archives []string
	Roster   *provision.Roster
	Witness  note.Verifier
	// NoWitness does not look in the witness stream.
	NoWitness bool
}

// Prove returns the JSON of the proof of store's movement key.
func (p AuditProver) Prove(ctx context.Context, store, key string) ([]byte, error) {
	proof, err := audit.Prove(ctx, audit.ProveOptions{
		Conn: p.Conn, APIPrefix: p.APIPrefix, Archives: p.Archives, Key: key, Store: store,
		Roster: p.Roster, Witness: p.Witness, NoWitness: p.NoWitness,
	})
	if err != nil {
		return nil, err
	}
	return proof.Marshal()
}
