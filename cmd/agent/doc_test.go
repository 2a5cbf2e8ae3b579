package main

import (
	"io"
	"testing"

	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/testkit/doccheck"
)

// TestDocsRunRealCommands: every command line of agent in the README and
// docs/ names commands and flags agent has, so that a rename fails here
// rather than in a reader's terminal.
func TestDocsRunRealCommands(t *testing.T) {
	root := newRoot(&cli.Streams{Out: io.Discard, Err: io.Discard})
	doccheck.Docs(t, root, doccheck.Agent, "../..", 20)
}
