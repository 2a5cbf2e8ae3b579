package command

import "time"

// Item is one quarantined movement with its failure context, without its
// payload (DESIGN P6): what List answers and what an operator reads to
// decide between redrive and purge.
type Item struct {
	Key        string `json:"key"`
	MovementID string `json:"movement_id"`
	Class      string `json:"class"`
	Schedule   string `json:"schedule,omitempty"`
	Seq        uint64 `json:"seq"`
	// Reason is "permanent:<kind>" or "exhausted:<kind>".
	Reason    string `json:"reason"`
	ErrorKind string `json:"error_kind,omitempty"`
	ErrorText string `json:"error_text,omitempty"`
	Attempts  int    `json:"attempts"`

	EnqueuedAt    time.Time  `json:"enqueued_at"`
	FirstFailure  *time.Time `json:"first_failure_at,omitempty"`
	LastFailure   *time.Time `json:"last_failure_at,omitempty"`
	QuarantinedAt time.Time  `json:"quarantined_at"`
	// DelaysWaitedMS are the retry delays that were waited, in milliseconds.
	DelaysWaitedMS []int64 `json:"delays_waited_ms,omitempty"`
	ConnState      string  `json:"conn_state,omitempty"`
	AgentVersion   string  `json:"agent_version,omitempty"`
}

// ListResult is what List answers.
type ListResult struct {
	// Items are the matching movements, oldest quarantine first.
	Items []Item `json:"items"`
	// Matched counts every match, also those cut by the limit.
	Matched int `json:"matched"`
}

// Selection says which quarantined movements an operation applies to:
// exactly one of Keys, All, or Reason and Oldest (either or both: the
// Oldest oldest movements whose reason matches Reason; see Filter.Reason).
type Selection struct {
	Keys   []string `json:"keys,omitempty"`
	All    bool     `json:"all,omitempty"`
	Reason string   `json:"reason,omitempty"`
	Oldest int      `json:"oldest,omitempty"`
}

// Missing is a selected key that is not quarantined.
type Missing struct {
	Key string `json:"key"`
	// State is where the key is instead: pending, synced, purged, or
	// StateUnknown when the agent holds no such movement.
	State string `json:"state"`
}

// StateUnknown is the state of a key the agent does not hold (never
// submitted, or synced and pruned after the dedupe horizon).
const StateUnknown = "unknown"

// MaxSpread bounds a redrive's spread: movements that wait longer than a
// day to be sent again are more likely a typo than a plan.
const MaxSpread = 24 * time.Hour
