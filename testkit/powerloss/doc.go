// Package powerloss tests DESIGN P1 through power loss, not only through
// kill -9: it runs the built agent with its data directory on a powerfs
// filesystem, cuts the power at random moments (during concurrent ingest,
// agent enqueue, an ASAP file taken from a drop folder, the creation of a data directory, a drain to central,
// every phase of a compaction, the upgrade of a data file of an older
// schema at start, and journalled operator commands), and
// checks the state that comes back: the data file opens, the queue's
// Verify passes, every acknowledged movement is held exactly once, and
// every command that completed left its journal entries and files.
//
// A short run is part of `go test ./...`; RXEDGE_POWERLOSS=full runs at
// least 50 cuts per scenario. RXEDGE_POWERLOSS_SEED repeats a run. The
// tests skip, saying why, where FUSE cannot be mounted (not Linux, not
// root, no usable /dev/fuse).
package powerloss
