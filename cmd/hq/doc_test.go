package main

import (
	"io"
	"testing"

	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/testkit/doccheck"
)

// TestDocsRunRealCommands: every command line of hq in the README and
// docs/ names commands and flags hq has, so that a rename fails here
// rather than in a reader's terminal.
func TestDocsRunRealCommands(t *testing.T) {
	root := newRoot(&cli.Streams{Out: io.Discard, Err: io.Discard})
	doccheck.Docs(t, root, doccheck.HQ, "../..", 20)
}
