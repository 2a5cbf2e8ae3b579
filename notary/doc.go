// Package notary signs and publishes the store's checkpoints (DESIGN P9;
// the contract is central/ledger, the log itself is the data file's, see
// queue's ledger.go).
//
// Every checkpoint interval, when the log grew since its last checkpoint,
// the notary signs a checkpoint of it with the store's key and has the
// queue keep it; then, whenever central is reachable, it publishes every
// checkpoint not yet acknowledged to the store's own movement subjects
// under the checkpoint's token, with the dedupe headers a movement uses,
// until central acknowledges it. So every movement the store acknowledged
// is covered by a signed checkpoint within one interval, and by a
// published one as soon as central can be reached.
//
// The notary is never on the delivery path: the queue logs movements
// whatever becomes of checkpoints, and a key that cannot be read stops
// only the signing. A key file that is missing (a lost key) is made anew,
// loudly: logged at error level, journalled, and shown by status until
// the new public key is in the roster (agent ledger rotate-key prints it).
//
// Ownership: one goroutine (Run) does all the work; the connection comes
// from the sender (OnConnect) and the state for status is read under a
// mutex.
package notary
