//go:build !rxedge_nodev

package main

import (
	"errors"

	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/hub"
)

// A default build carries the trial's embedded central (`run --dev`); the
// packages build with the tag rxedge_nodev (devhub_nodev.go), so an
// installed store's binary carries no NATS server.

// devHub is the embedded central of `agent run --dev`.
type devHub interface {
	URL() string
	Shutdown()
}

// errNoDevHub is never returned by this build (see devhub_nodev.go).
var errNoDevHub = errors.New("no development hub in this build")

// startDevHub starts the trial's central on listen, with its streams
// provisioned, JetStream under storeDir.
func startDevHub(listen, storeDir string) (devHub, error) {
	return hub.Start(hub.Options{Listen: listen, StoreDir: storeDir, Provision: streams.Provision})
}
