package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/rxedge/agent/testkit/agentbin"
)

// TestMain keeps the tests from reading the nats CLI's contexts and
// variables of whoever runs them, which every command that reaches
// central would; and removes the binaries tests built.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rxedge-hq-test-xdg")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_CONFIG_HOME", dir)
	for _, v := range []string{"NATS_URL", "NATS_USER", "NATS_PASSWORD", "NATS_TOKEN", "NATS_CREDS", "NATS_NKEY", "NATS_CA", "NATS_CERT", "NATS_KEY", "NATS_INBOX_PREFIX", "NATS_CONTEXT", "RXEDGE_NATS_PASSWORD"} {
		os.Unsetenv(v)
	}
	code := m.Run()
	os.RemoveAll(dir)
	agentbin.Cleanup()
	os.Exit(code)
}
