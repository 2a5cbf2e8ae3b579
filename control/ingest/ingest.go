// Package ingest is the ingest: section of the agent's configuration: the
// address of the HTTP ingest listener, its bearer token, the bounds of a
// submission, and the other hosts and web origins it answers. Package
// control serves the listener; this package holds its defaults and its
// rules, and imports nothing of the agent but the listener rule
// (internal/listen), so the configuration layer can check the section
// without linking the local API.
package ingest

// Defaults.
const (
	DefaultListen           = "127.0.0.1:8717"
	DefaultMaxRequestBytes  = 4 << 20
	DefaultMaxMovementBytes = 64 << 10
)
