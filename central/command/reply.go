package command

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Reply is an agent's answer to a command: {"ok":true,"result":…} or
// {"ok":false,"error":"…","code":"…"}. A failed redrive may carry, with its
// error, the result of what was done before it failed.
type Reply struct {
	OK     bool            `json:"ok"`
	Store  string          `json:"store"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	Code   string          `json:"code,omitempty"`
}

// Codes of a failed Reply. The refusals (Refused) are journalled.
const (
	CodeUnsigned     = "unsigned"      // a command that changes the store came unsigned
	CodeUnknownKey   = "unknown_key"   // signed by a key not in remote.operator_keys
	CodeBadSignature = "bad_signature" // the signature does not verify
	CodeExpired      = "expired"       // expired, or expiring too far ahead
	CodeReplayed     = "replayed"      // its nonce was accepted before
	CodeMalformed    = "malformed"     // not a valid envelope
	CodeWrongTarget  = "wrong_target"  // the envelope names another store or command

	CodeUnknownCommand = "unknown_command" // no such command on this subject
	CodeBadRequest     = "bad_request"     // arguments refused as given; nothing done
	CodeFailed         = "failed"          // the operation failed
	CodeReplyTooLarge  = "reply_too_large" // the answer exceeds the server's max_payload
)

var refusalCodes = []string{CodeUnsigned, CodeUnknownKey, CodeBadSignature, CodeExpired, CodeReplayed, CodeMalformed, CodeWrongTarget}

// Error is a failed Reply, as the client returns it.
type Error struct {
	Store string
	Cmd   string
	Code  string
	Msg   string
}

func (e *Error) Error() string {
	verb := "failed"
	if e.Refused() {
		verb = "refused"
	}
	return fmt.Sprintf("remote: store %s %s %s: %s", e.Store, verb, e.Cmd, e.Msg)
}

// Refused reports whether the agent refused the command itself (its
// signature, key, expiry, nonce or form) rather than failed to do it.
func (e *Error) Refused() bool { return slices.Contains(refusalCodes, e.Code) }

// ListArgs are the arguments of dlq.list, and the store's own filter of
// its quarantine (dlq.Filter).
type ListArgs struct {
	// Reason matches the quarantine reason ("<class>:<kind>"):
	//   - "permanent:too_large": exactly that reason;
	//   - "permanent" or "exhausted" (or "permanent:"): every reason of that class;
	//   - "too_large" (a kind alone): that kind in either class.
	// Matching ignores case.
	Reason string `json:"reason,omitempty"`
	// Since and Until bound the quarantine time: Since inclusive, Until
	// exclusive; a zero time is no bound.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// Limit keeps the Limit oldest matches (by quarantine time); 0 keeps
	// all in the store's own calls, DefaultListLimit over NATS.
	Limit int `json:"limit,omitempty"`
}

// Limits of dlq.list: its reply must fit in one NATS message.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// RedriveArgs are the arguments of dlq.redrive; see dlq.RedriveRequest.
type RedriveArgs struct {
	Selection
	ReasonText string `json:"reason_text"`
	// Spread is a Go duration ("10m"), at most MaxSpread.
	Spread string `json:"spread,omitempty"`
	DryRun bool   `json:"dry_run,omitempty"`
}

// MaxReplyKeys bounds the keys a redrive reply lists.
const MaxReplyKeys = 1000

// RedriveResult is what a remote redrive did (or, in a dry run, would do).
type RedriveResult struct {
	DryRun bool `json:"dry_run,omitempty"`
	// Redriven counts the movements put back to pending.
	Redriven int `json:"redriven"`
	// Keys are the redriven keys, the first MaxReplyKeys of them; MoreKeys
	// counts the others.
	Keys     []string `json:"keys"`
	MoreKeys int      `json:"more_keys,omitempty"`
	// NotFound are selected keys that were not quarantined, and where they
	// are instead.
	NotFound []Missing `json:"not_found,omitempty"`
	// Actor and Nonce are as journalled.
	Actor string `json:"actor"`
	Nonce string `json:"nonce"`
}

// Summary is one store's answer to fleet.status: counts and states only.
type Summary struct {
	StoreID string `json:"store_id"`
	// State is the connection state (online, offline, paused, idle) and
	// Reason why it is not online.
	State                 string `json:"state"`
	Reason                string `json:"reason,omitempty"`
	Pending               uint64 `json:"pending"`
	PendingControlled     uint64 `json:"pending_controlled"`
	Quarantined           uint64 `json:"quarantined"`
	QuarantinedControlled uint64 `json:"quarantined_controlled"`
	SyncedTotal           uint64 `json:"synced_total"`
	// HighestSeq is the last sequence the store assigned (status
	// HighestSeq): head office's reconciliation expects 1..HighestSeq in
	// the archive. Absent (0) from agents older than the field.
	HighestSeq uint64 `json:"highest_seq,omitempty"`
	// FileID is the identity of the data file that gave HighestSeq;
	// absent from agents older than the field.
	FileID string `json:"file_id,omitempty"`
	// OldestPendingAge is in seconds at GeneratedAt; absent when nothing is
	// pending.
	OldestPendingAge *float64   `json:"oldest_pending_age_seconds,omitempty"`
	LastSyncAt       *time.Time `json:"last_sync_at,omitempty"`
	Version          string     `json:"version"`
	GeneratedAt      time.Time  `json:"generated_at"`
}
