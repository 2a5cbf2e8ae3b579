package main

import (
	"testing"

	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/testkit/agenttest"
)

// runDaemon runs the agent in this process until the test ends
// (agenttest.Run).
var runDaemon = agenttest.Run

// localOptions are the options of an agent for dir with no ingest
// listener and no central.
func localOptions(t *testing.T, dir string) settings.Options {
	t.Helper()
	c := settings.Config{StoreID: cliStore, DataDir: dir}
	c.Ingest.Listen = "off"
	opts, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	return opts
}
