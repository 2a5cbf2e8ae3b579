package remote

import (
	"encoding/hex"
	"fmt"

	"github.com/rxedge/agent/central/command"
)

// checkLeaves validates the range of leaves a ledger request asks for.
func checkLeaves(r *command.SeqRange) error {
	if r == nil {
		return nil
	}
	if r[0] == 0 || r[0] > r[1] {
		return &badRequest{"leaves [from,to] must have 1 ≤ from ≤ to"}
	}
	if r[1]-r[0] >= command.MaxLedgerLeaves {
		return &badRequest{fmt.Sprintf("at most %d leaves may be asked at once: split the request", command.MaxLedgerLeaves)}
	}
	return nil
}

// ledger answers the store's newest checkpoint, whether central
// acknowledged it, the store's public key, and the leaves asked that the
// file still holds.
func (r *Responder) ledger(a command.LedgerArgs) (command.LedgerResult, error) {
	var res command.LedgerResult
	st, err := r.o.Queue.Ledger()
	if err != nil {
		return res, err
	}
	if st.Latest != nil {
		res.Checkpoint, res.Published = st.Latest.Note, st.Latest.Published
	}
	if r.o.PublicKey != nil {
		res.PublicKey = r.o.PublicKey()
	}
	if a.Leaves != nil {
		leaves, err := r.o.Queue.LogLeaves(a.Leaves[0], a.Leaves[1], command.MaxLedgerLeaves)
		if err != nil {
			return res, err
		}
		for _, l := range leaves {
			res.Leaves = append(res.Leaves, command.LedgerLeaf{Seq: l.Seq, Key: hex.EncodeToString(l.Key[:]), Digest: hex.EncodeToString(l.Digest[:])})
		}
	}
	r.o.Logger.Info("REMOTE_LEDGER", "log", st.Log, "size", st.Size, "leaves", len(res.Leaves))
	return res, nil
}
