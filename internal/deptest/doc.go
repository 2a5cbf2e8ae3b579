// Package deptest checks the shape of the module: the direction of its
// dependencies, what a package must never depend on (no client package
// links nats-server; central imports nothing of ours), what each of the
// two binaries links in each build it ships in (the store's agent nothing
// of head office, pgx or, in production, a NATS server; head office's hq
// no bbolt and no store package), and that every package states its
// promise in a doc comment. It has no code of its own; see its tests.
package deptest
