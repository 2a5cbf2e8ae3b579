package central

import (
	"regexp"

	"github.com/nats-io/nats.go/jetstream"
)

// Movement subjects: rx.mv.<store>.<key>, one per movement.
const (
	// MovementPrefix starts the subject of every movement; see Subject.
	MovementPrefix = "rx.mv."
	// StreamSubjects is the subject filter of StreamName: every store's
	// movements.
	StreamSubjects = MovementPrefix + ">"
)

// Subject returns the subject a store publishes a movement to:
// "rx.mv.<store>.<key>". One subject holds at most one message, which is
// what makes a key stored at most once. Subject(store, ">") is every
// movement of one store.
func Subject(store, key string) string {
	return MovementPrefix + store + "." + key
}

// DirectGetSubject is where a client asks for the message stored on a
// movement subject without stream-info permission:
// "$JS.API.DIRECT.GET.RX_MOVEMENTS.<subject>". The stream allows direct
// gets, and an agent is granted this for its own subjects only.
func DirectGetSubject(subject string) string {
	return jetstream.DefaultAPIPrefix + "DIRECT.GET." + StreamName + "." + subject
}

// Heartbeat subjects: rx.status.<store>.
const (
	// StatusPrefix starts the subject of every heartbeat; see StatusSubject.
	StatusPrefix = "rx.status."
	// StatusSubjects is every store's heartbeat, for a watcher.
	StatusSubjects = StatusPrefix + ">"
)

// StatusSubject is where the agent of store publishes its heartbeat.
func StatusSubject(store string) string { return StatusPrefix + store }

// FleetToken is reserved: no store may use it as its id (it named the
// fleet's scatter-gather control subject, rx.ctl.fleet.status, which
// agents of older versions still answer; the control subjects are package
// command's).
const FleetToken = "fleet"

// storeIDPattern is the form of a store id: it is a token of NATS subjects
// and the name of the store's account in the generated server config.
var storeIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// ValidStoreID reports whether s can be a store id: 1 to 32 letters,
// digits, '-' and '_', and not the reserved FleetToken. Settings, the
// remote commands and the roster all check ids with it.
func ValidStoreID(s string) bool { return storeIDPattern.MatchString(s) && s != FleetToken }

// inboxStem starts every identity's inbox prefix; see InboxPrefix.
const inboxStem = "_INBOX_"

// InboxPrefix is the inbox prefix of a store's agent or an operator, named
// by its store id or user: replies to it go to _INBOX_<identity>.…, which
// the server lets only that identity subscribe to. A plain _INBOX.> grant
// would let one store read another's replies.
func InboxPrefix(identity string) string { return inboxStem + identity }
