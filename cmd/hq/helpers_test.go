package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/testkit/agentbin"
)

// cliStore is the store the tests' quarantines and agents are of.
const cliStore = "S0042"

// productionTemplate is the generated production configuration the tests
// run central with.
var productionTemplate = filepath.Join("..", "..", "configs", "nats", "production.conf.template")

// adminConnect are the production template's administrator credentials.
var adminConnect = []nats.Option{nats.UserInfo("admin", "CHANGE-ME-admin"), nats.CustomInboxPrefix(central.InboxPrefix("admin"))}

// runCLI runs hq with args in the test's process and returns what it
// printed and its exit code.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(""), &out, &errb)
	code = exitCode(err, &errb)
	return out.String(), errb.String(), code
}

// mustCLI is runCLI for a command that must succeed.
func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, errs, code := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("hq %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// agentCLI runs the built store agent (rxedge-agent, the other binary)
// with args, for the tests that look at a store's side of a head-office
// command, and returns what it printed and its exit code.
func agentCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, agentbin.Build(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("agent %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}

// mustAgent is agentCLI for a command that must succeed.
func mustAgent(t *testing.T, args ...string) string {
	t.Helper()
	out, errs, code := agentCLI(t, args...)
	if code != 0 {
		t.Fatalf("agent %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errs)
	}
	return out
}
