package console

import (
	"context"
	"errors"
	"time"

	"github.com/rxedge/agent/headoffice/fleet"
)

// The console reads what hq's other jobs keep through these interfaces;
// hq's service satisfies them (from PostgreSQL, from its fleet watch).
// A nil one leaves its page saying what is not configured.

// Finding is one finding of head office's checks: verification, the
// witness, reconciliation.
type Finding struct {
	// Source is the check: verification, witness or reconciliation.
	Source string
	// Kind is the finding's code (e.g. rewritten, gap, forked).
	Kind  string
	Store string
	// Log is the store's log, when the finding is about one.
	Log string
	// From and To are the store sequences it is about (0 when none).
	From, To uint64
	At       time.Time
	// Detail says what was found, in words: keys, sequences, counts,
	// never a payload.
	Detail string
}

// FindingQuery selects findings: of one store ("" for all), the newest
// Limit.
type FindingQuery struct {
	Store string
	Limit int
}

// Findings are head office's findings, newest first.
type Findings interface {
	Findings(ctx context.Context, q FindingQuery) ([]Finding, error)
	// CountByStore counts the findings of each of stores (a page's).
	CountByStore(ctx context.Context, stores []string) (map[string]int, error)
}

// Problem is one alert of the fleet watch (fleet.Problem): at most one
// open per kind and store.
type Problem = fleet.Problem

// ProblemQuery selects problems: of one store ("" for all), open only or
// also the newest Limit closed ones.
type ProblemQuery struct {
	Store    string
	OpenOnly bool
	Limit    int
}

// Problems are the fleet watch's problems: the open ones first, then the
// closed ones newest first.
type Problems interface {
	Problems(ctx context.Context, q ProblemQuery) ([]Problem, error)
}

// BookProblems are the Problems of a fleet.ProblemBook, the fleet
// watch's book kept in memory.
type BookProblems struct{ Book *fleet.ProblemBook }

// Problems lists the book's problems by q.
func (b BookProblems) Problems(_ context.Context, q ProblemQuery) ([]Problem, error) {
	return b.Book.List(q.Store, q.OpenOnly, q.Limit), nil
}

// Movement is one movement as the sink holds it, without its payload,
// note or prescription reference: what an inspector looks up.
type Movement struct {
	Store         string
	Key           string
	Seq           uint64
	MovementID    string
	Type          string
	NDC           string
	Quantity      string
	Unit          string
	OccurredAt    time.Time
	Schedule      string
	Lot           string
	Digest        string
	ArchiveStream string
	ArchiveSeq    uint64
	ArchivedAt    time.Time
}

// ErrNoMovement is matched by Records.ByKey's error when the sink holds
// no such movement.
var ErrNoMovement = errors.New("the sink holds no movement of that store and key")

// Records look movements up in the sink's tables, each by an index.
type Records interface {
	// ByKey is one store's movement of a key.
	ByKey(ctx context.Context, store, key string) (Movement, error)
	// ByRxRef are the movements of a prescription reference, at most
	// limit.
	ByRxRef(ctx context.Context, rxRef string, limit int) ([]Movement, error)
	// ByNDC are one store's movements of an NDC, newest first, at most
	// limit.
	ByNDC(ctx context.Context, store, ndc string, limit int) ([]Movement, error)
}

// Prover writes the inspector's proof of a movement (the JSON of
// central/ledger.Proof): AuditProver calls headoffice/audit's Prove.
type Prover interface {
	Prove(ctx context.Context, store, key string) ([]byte, error)
}

// Entry is one line of hq's journal of the console: who did or tried
// what, to which stores, why, and how it ended.
type Entry struct {
	At     time.Time `json:"at"`
	User   string    `json:"user"`
	Roles  []string  `json:"roles,omitempty"`
	Action string    `json:"action"`
	// Outcome is ActionAsked before an action is sent, then ActionDone,
	// ActionPartial, ActionFailed, or ActionRefused for a user whose role
	// does not allow it.
	Outcome string   `json:"outcome"`
	Stores  []string `json:"stores,omitempty"`
	Keys    int      `json:"keys,omitempty"`
	Reason  string   `json:"reason,omitempty"`
	Detail  string   `json:"detail,omitempty"`
}

// Outcomes of a journal entry.
const (
	ActionAsked   = "asked"
	ActionDone    = "done"
	ActionPartial = "partial"
	ActionFailed  = "failed"
	ActionRefused = "refused"
)

// Journal is hq's append-only journal of what console users did and
// tried (DESIGN P8): an action is sent only once its entry is recorded.
type Journal interface {
	Record(ctx context.Context, e Entry) error
	// Recent are the newest entries about store ("" for all), at most
	// limit, newest first.
	Recent(ctx context.Context, store string, limit int) ([]Entry, error)
}
