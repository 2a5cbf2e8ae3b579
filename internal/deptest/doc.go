// Package deptest checks the shape of the module: the direction of its
// dependencies, what a package must never depend on (no client package
// links nats-server; central imports nothing of ours), and that every
// package states its promise in a doc comment. It has no code of its own;
// see its tests.
package deptest
