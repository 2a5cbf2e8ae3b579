package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/testkit/agentbin"
	"github.com/rxedge/agent/testkit/syncbuf"
)

func TestMain(m *testing.M) {
	code := m.Run()
	agentbin.Cleanup()
	os.Exit(code)
}

// agent is one run of the built binary.
type agent struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string // ingest host:port
	stderr *syncbuf.Buffer
	exited chan error
}

// startAgent runs `agent run` with the given prefix command (e.g. prlimit)
// and waits until it is ready.
func startAgent(t *testing.T, dataDir, addr string, prefix []string, extra ...string) *agent {
	t.Helper()
	bin := agentbin.Build(t)
	args := append([]string{}, prefix...)
	args = append(args, bin, "run", "--store-id", "S0042", "--data-dir", dataDir, "--ingest", addr, "--log-level", "warn")
	args = append(args, extra...)
	cmd := exec.Command(args[0], args[1:]...)
	a := &agent{t: t, cmd: cmd, addr: addr, stderr: &syncbuf.Buffer{}, exited: make(chan error, 1)}
	cmd.Stderr = a.stderr
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.exited <- cmd.Wait() }()
	t.Cleanup(func() { a.kill() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return a
			}
		}
		select {
		case err := <-a.exited:
			t.Fatalf("agent exited before it was ready: %v\n%s", err, a.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not ready after 10s\n%s", a.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (a *agent) kill() {
	if a.cmd.Process != nil {
		a.cmd.Process.Kill()
	}
	select {
	case <-a.exited:
	case <-time.After(5 * time.Second):
	}
}

// movementJSON is a valid movement with the given id.
func movementJSON(id string, extra string) string {
	return fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"%s}`, id, extra)
}

// accepted is the answer of POST /v1/movements.
type accepted struct {
	Results []struct {
		MovementID string `json:"movement_id"`
		Key        string `json:"key"`
		Duplicate  bool   `json:"duplicate"`
	} `json:"results"`
	Error string `json:"error"`
}

// post submits movements as a JSON array; it returns the status code and
// the decoded answer (code 0 when the request failed).
func post(ctx context.Context, client *http.Client, addr string, body []string) (int, accepted, error) {
	var a accepted
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/movements", strings.NewReader("["+strings.Join(body, ",")+"]"))
	if err != nil {
		return 0, a, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, a, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		// The answer was cut off: the movements may or may not be stored,
		// and they were not acknowledged.
		return 0, a, err
	}
	if err := json.Unmarshal(data, &a); err != nil {
		return 0, a, fmt.Errorf("answer %d %q: %w", resp.StatusCode, data, err)
	}
	return resp.StatusCode, a, nil
}

// agentJSON runs a CLI command of the built binary and decodes its JSON
// output.
func agentJSON(t *testing.T, out any, args ...string) {
	t.Helper()
	cmd := exec.Command(agentbin.Build(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
			t.Fatalf("agent %v: %v\n%s", args, err, stderr.String())
		}
	}
	if err := json.NewDecoder(bufio.NewReader(&stdout)).Decode(out); err != nil {
		t.Fatalf("agent %v: %v\n%s", args, err, stdout.String())
	}
}

func dataFile(dir string) string { return filepath.Join(dir, "agent.db") }
