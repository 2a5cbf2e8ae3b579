package command

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
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
	// Actor is the person on whose behalf the operator key signs (a
	// head-office console's user, "console:alice"): the store journals it
	// beside the key. Sent only to agents whose summary lists
	// FeatureRedriveActor; see ValidActor.
	Actor string `json:"actor,omitempty"`
}

// MaxActorBytes bounds RedriveArgs.Actor.
const MaxActorBytes = 96

// ValidActor reports whether s may be sent as RedriveArgs.Actor: at most
// MaxActorBytes of letters, digits and . _ @ : + = - (an e-mail address,
// a certificate's common name in that alphabet, a prefix with a colon).
func ValidActor(s string) bool {
	if s == "" || len(s) > MaxActorBytes {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("._@:+=-", r):
		default:
			return false
		}
	}
	return true
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

	// The fields below are absent from agents older than them; a reader
	// shows them as unknown.

	// Problem is the reason central cannot be reached or used, one of
	// status.ConnReasons.
	Problem string `json:"problem,omitempty"`
	// FreeDiskBytes is the free space on the data file's disk.
	FreeDiskBytes *uint64 `json:"free_disk_bytes,omitempty"`
	// FileOrigin is where the data file comes from (status.FileLineage
	// Origin: new, migrated, replaced, restored, adopted), and RestoredAt
	// when the agent found it restored from an older copy (reported for
	// status.RestoredNotice).
	FileOrigin string     `json:"file_origin,omitempty"`
	RestoredAt *time.Time `json:"restored_at,omitempty"`
	// Lineage is the start-up lineage check (status.LineageWaiting,
	// LineageDone, LineageHeld); held also when central's record names
	// a data file this one does not know, and nothing is sent.
	Lineage string `json:"lineage,omitempty"`
	// CheckpointLog, CheckpointSize and CheckpointAt are the store's
	// newest checkpoint central acknowledged: its log, its size and when
	// it was signed.
	CheckpointLog  string     `json:"checkpoint_log,omitempty"`
	CheckpointSize int64      `json:"checkpoint_size,omitempty"`
	CheckpointAt   *time.Time `json:"checkpoint_at,omitempty"`
	// Features lists what the agent accepts beyond the first form of the
	// commands (FeatureRedriveActor), so head office sends it only to
	// agents that read it: an older agent refuses an argument it does
	// not know.
	Features []string `json:"features,omitempty"`
}

// FeatureRedriveActor says an agent reads RedriveArgs.Actor.
const FeatureRedriveActor = "redrive.actor"
