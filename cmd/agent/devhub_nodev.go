//go:build rxedge_nodev

package main

import "github.com/rxedge/agent/internal/cli"

// This build (the packages' and releases': tag rxedge_nodev) carries no
// NATS server: a store PC never runs one, and `run --dev` says so.

// devHub is the embedded central of `agent run --dev`.
type devHub interface {
	URL() string
	Shutdown()
}

// errNoDevHub is run --dev's answer in this build: a usage error that
// says where a trial's central comes from instead.
var errNoDevHub = cli.UsageError("run --dev: this build of the agent has no development hub (installed agents carry no NATS server): " +
	"start a trial central with `rxedge-hq hub --store-dir DIR` and run the agent with `--store-id DEV0001 --data-dir DIR --nats nats://127.0.0.1:4222`, " +
	"or run the trial from the source: `go run ./cmd/agent run --dev`")

func startDevHub(string, string) (devHub, error) { return nil, errNoDevHub }
