//go:build unix

package main

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
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/agentbin"
	"github.com/rxedge/agent/testkit/natstest"
)

// readmeBlock returns the shell block that follows the marker line
// <!-- name --> in docs/inspector.md.
func readmeBlock(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "inspector.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(name) + " -->\n```sh\n(.*?)\n```").FindSubmatch(b)
	if m == nil {
		t.Fatalf("docs/inspector.md has no shell block after <!-- %s -->", name)
	}
	return string(m[1])
}

// shell runs a block of docs/inspector.md with bash -e in dir, the binaries as the
// packages install them (rxedge-hq, rxedge-agent) first on PATH, and env
// added to the test's environment.
func shell(t *testing.T, bin, dir, block string, env ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-c", block)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}, env...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("the inspector page's block failed: %v\n--- block\n%s\n--- stdout\n%s--- stderr\n%s", err, block, out.String(), errb.String())
	}
	return out.String()
}

// installed puts the built binaries in a directory under the names the
// packages install them with: head office's, and the store's production
// build (no development hub).
func installed(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, path := range map[string]string{
		"rxedge-hq":    agentbin.BuildHQ(t),
		"rxedge-agent": agentbin.BuildTagged(t, "agent", "rxedge_nodev"),
	} {
		if err := os.Symlink(path, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runStore runs the built agent as store S0001 of the production
// configuration at url, trusting the operator key pub, and returns its
// data directory and ingest address once it has started.
func runStore(t *testing.T, agent, url, pub string) (string, string) {
	t.Helper()
	return runStoreAs(t, agent, url, "S0001", pub)
}

// runStoreAs is runStore for store.
func runStoreAs(t *testing.T, agent, url, store, pub string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	conf := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "store_id: %s\ndata_dir: %q\nnats:\n  servers: [%q]\n  user: %s\n  password: CHANGE-ME-%s\n"+
		"remote:\n  operator_keys: [%s]\nledger:\n  checkpoint_interval: 1s\n", store, data, url, store, store, pub), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(agent, "run", "--config", conf, "--ingest", agentbin.FreeAddr(t))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 1)
	var logs bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			logs.Write(append(sc.Bytes(), '\n'))
			var line struct{ Msg, Ingest string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "STARTED" {
				started <- line.Ingest
			}
		}
		io.Copy(io.Discard, stderr)
		cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
		}
	})
	select {
	case ingest := <-started:
		return data, ingest
	case <-done:
		t.Fatal("the agent exited before it started")
	case <-time.After(20 * time.Second):
		t.Fatal("the agent did not log STARTED within 20 s")
	}
	return "", ""
}

// TestInspectorProcedureFromTheDocs runs the inspector's
// procedure as written, with the binaries as the packages install them,
// against a real nats-server run with the production configuration: head
// office makes its operator key with the page's setup block; the store
// (S0001) trusts it, acknowledges movements and publishes a signed
// checkpoint; then the procedure block checks one movement's proof
// offline and has verify, as the audit user, ask the store for its newest
// checkpoint with that key. Every command must succeed (bash -e), and
// verify's report must hold and have asked the store.
func TestInspectorProcedureFromTheDocs(t *testing.T) {
	bin := installed(t)
	h := natstest.StartHub(t, natstest.WithConfigFile(productionTemplate, adminConnect...))
	work := t.TempDir()

	out := shell(t, bin, work, readmeBlock(t, "inspector: setup"))
	pub := regexp.MustCompile(`(?m)^U[A-Z2-7]{55}$`).FindString(out)
	if pub == "" {
		t.Fatalf("the setup block printed no operator public key:\n%s", out)
	}

	data, ingest := runStore(t, filepath.Join(bin, "rxedge-agent"), h.URL(), pub)
	var body strings.Builder
	body.WriteString("[")
	for i := range 5 {
		if i > 0 {
			body.WriteString(",")
		}
		fmt.Fprintf(&body, `{"movement_id":"INSP-%d","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`, i)
	}
	body.WriteString("]")
	resp, err := http.Post("http://"+ingest+control.IngestPath, "application/json", strings.NewReader(body.String()))
	if err != nil {
		t.Fatal(err)
	}
	var accepted struct {
		Results []struct{ Key string } `json:"results"`
	}
	err = json.NewDecoder(resp.Body).Decode(&accepted)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusAccepted || len(accepted.Results) != 5 {
		t.Fatalf("submission: %d, %v, %+v", resp.StatusCode, err, accepted)
	}
	st := waitLedger(t, data, 5)
	if err := os.WriteFile(filepath.Join(work, "stores.txt"), []byte("S0001 "+st.Ledger.PublicKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	key := accepted.Results[2].Key
	out = shell(t, bin, work, readmeBlock(t, "inspector: procedure"),
		"NATS_URL="+h.URL(), "NATS_USER=audit", "NATS_PASSWORD=CHANGE-ME-audit", "STORE=S0001", "KEY="+key, "PARTITIONS=1", "RXEDGE_DATA_DIR="+data)
	if !strings.Contains(out, "OK: movement "+key+" is sequence 3 of store S0001's log") {
		t.Errorf("verify-proof did not say the proof holds:\n%s", out)
	}
	b, err := os.ReadFile(filepath.Join(work, "S0001-verify.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep audit.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("verify --json: %v\n%s", err, b)
	}
	if !rep.OK() || len(rep.Logs) != 1 || rep.Logs[0].StoreLatest != 5 || rep.Logs[0].Matched != 5 {
		t.Errorf("verify's report: %s\nwant it to hold, with the store's newest checkpoint (5) asked and matched", b)
	}
}

// waitLedger waits until the agent of data has published a checkpoint of
// n movements (its state is in a real server: there is no event to await).
func waitLedger(t *testing.T, data string, n int64) *status.Status {
	t.Helper()
	c := control.Dial(control.Endpoint(data))
	defer c.CloseIdleConnections()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := c.Status(context.Background())
		if err == nil && st.Ledger != nil && st.Ledger.Published == n && st.Counts.Synced.Total == uint64(n) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, no published checkpoint of %d synced movements: %+v, %v", n, st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
