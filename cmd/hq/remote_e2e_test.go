package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/hub"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/remote"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/agenttest"
	"github.com/rxedge/agent/testkit/ledgertest"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/syncbuf"
)

const liveStore = "S0001"

// liveAgent is the whole agent (daemon.Run) running in this process
// against a real hub, its log lines captured.
type liveAgent struct {
	dir    string
	ingest string
	logs   *syncbuf.Buffer
}

// startLiveAgent runs the agent for liveStore with short retry delays,
// trusting operatorKeys, until the test ends.
func startLiveAgent(t *testing.T, hubURL string, operatorKeys ...string) *liveAgent {
	t.Helper()
	dir := t.TempDir()
	if n := len(control.Endpoint(dir)); n >= 104 {
		t.Skipf("the control socket's path in the temporary directory is %d bytes, over the limit of unix socket addresses", n)
	}
	c := settings.Config{StoreID: liveStore, DataDir: dir}
	c.Ingest.Listen = "127.0.0.1:0"
	c.NATS.Servers = []string{hubURL}
	c.NATS.PingInterval = 500 * time.Millisecond
	c.Sync.AttemptTimeout = 2 * time.Second
	c.Sync.ResumeJitter = 100 * time.Millisecond
	c.Sync.HeartbeatInterval = 200 * time.Millisecond
	c.Retry.Ordinary = settings.PolicyConfig{MaxAttempts: 5, BaseDelay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond}
	c.Retry.Controlled = settings.PolicyConfig{MaxAttempts: 7, BaseDelay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond}
	c.Remote.OperatorKeys = operatorKeys
	c.Log.Level = "debug"
	opts, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	a := &liveAgent{dir: dir, logs: &syncbuf.Buffer{}}
	log := slog.New(slog.NewJSONHandler(a.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", a.logs.String())
		}
	})
	a.ingest = agenttest.Run(t, opts, log)
	return a
}

// post submits movements on the ingest listener and returns the status
// code and body.
func (a *liveAgent) post(t *testing.T, body string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+a.ingest+"/v1/movements", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func (a *liveAgent) get(t *testing.T, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + a.ingest + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
	return string(b)
}

// waitFor polls the agent's status (a real server is involved, so there is
// no single event to await) until cond holds.
func (a *liveAgent) waitFor(t *testing.T, what string, cond func(*status.Status) bool) *status.Status {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := control.Dial(control.Endpoint(a.dir)).Status(context.Background())
		if err == nil && cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			if st != nil {
				t.Fatalf("after 30s, %s never happened: connection %+v, counts %+v", what, st.Connection, st.Counts)
			}
			t.Fatalf("after 30s, %s never happened: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// bigMovement is a movement larger than 2 KiB: the note holds 1000 runes
// of three bytes each.
func bigMovement(id, rxRef, notePrefix string) string {
	return liveMovement(id, rxRef, notePrefix+strings.Repeat("€", 1000-len([]rune(notePrefix))))
}

func liveMovement(id, rxRef, note string) string {
	return fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":%q,"schedule":"CII","rx_ref":%q,"note":%q}`,
		id, time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), rxRef, note)
}

// submitted are the keys of an accepted submission, by movement id.
func submitted(t *testing.T, body string) map[string]string {
	t.Helper()
	var sub control.Submission
	if err := json.Unmarshal([]byte(body), &sub); err != nil {
		t.Fatalf("submission answer %s: %v", body, err)
	}
	keys := map[string]string{}
	for _, r := range sub.Results {
		keys[r.MovementID] = r.Key
	}
	return keys
}

// raiseMaxPayload restarts the hub, on the same address and store, with a
// larger max_payload: what an operator does to central.
// reconnectedSince reports whether the agent is online on a connection
// made after t (its state before the restart may not have noticed the
// outage yet).
func reconnectedSince(st *status.Status, t time.Time) bool {
	c := st.Connection
	return c.State == status.Online && c.Since != nil && c.Since.After(t)
}

func raiseMaxPayload(t *testing.T, h *natstest.Server, n int32) *natstest.Server {
	t.Helper()
	addr, dir := h.Addr(), h.StoreDir()
	h.Stop()
	return natstest.StartHub(t, natstest.WithMaxPayload(n), func(o *hub.Options) {
		o.Listen, o.StoreDir = addr, dir
	})
}

// centralSubjects counts RX_MOVEMENTS' movements per subject (the
// stores' checkpoints left out).
func centralSubjects(t *testing.T, url string) (uint64, map[string]uint64) {
	t.Helper()
	nc := natstest.Connect(t, url)
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := natstest.JetStream(t, nc).Stream(ctx, central.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(central.StreamSubjects))
	if err != nil {
		t.Fatal(err)
	}
	msgs, subjects := info.State.Msgs, map[string]uint64{}
	for subj, n := range info.State.Subjects {
		if ledger.IsCheckpointToken(subj[strings.LastIndexByte(subj, '.')+1:]) {
			msgs -= n
			continue
		}
		subjects[subj] = n
	}
	return msgs, subjects
}

// TestRemoteRedriveEndToEnd: two movements are quarantined as too large by
// a hub with a small max_payload, and listed with their failure context;
// the hub's limit is raised; a local redrive delivers the first exactly
// once, a signed remote redrive the second; redriving either again does
// nothing; the journal shows both redrives with who and why.
func TestRemoteRedriveEndToEnd(t *testing.T) {
	h := natstest.StartHub(t, natstest.WithMaxPayload(2048))
	seedFile, pub := ledgertest.OperatorFile(t)
	a := startLiveAgent(t, h.URL(), pub)

	code, body := a.post(t, "["+strings.Join([]string{
		liveMovement("OK-1", "RX-1", ""), liveMovement("OK-2", "RX-2", ""), liveMovement("OK-3", "RX-3", ""),
		bigMovement("BIG-A", "RX-A", "long note A "), bigMovement("BIG-B", "RX-B", "long note B "),
	}, ",")+"]")
	if code != http.StatusAccepted {
		t.Fatalf("submission: %d %s", code, body)
	}
	keys := submitted(t, body)
	keyA, keyB := keys["BIG-A"], keys["BIG-B"]
	a.waitFor(t, "3 synced and 2 quarantined", func(st *status.Status) bool {
		return st.Counts.Synced.Total == 3 && st.Counts.Quarantined.Total == 2
	})

	// Listed with its failure context.
	var list dlq.ListResult
	if err := json.Unmarshal([]byte(mustAgent(t, "dlq", "list", "--json", "--data-dir", a.dir)), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 {
		t.Fatalf("dlq list: %+v, want 2 items", list)
	}
	for _, it := range list.Items {
		if it.Reason != "permanent:too_large" || it.ErrorKind == "" || it.ErrorText == "" || it.Attempts != 1 ||
			it.ConnState != "online" || it.AgentVersion == "" || it.Class != "controlled" || it.Schedule != "CII" {
			t.Errorf("quarantined item without its context: %+v", it)
		}
	}
	if ids := []string{list.Items[0].MovementID, list.Items[1].MovementID}; !slices.Equal(ids, []string{"BIG-A", "BIG-B"}) {
		t.Errorf("quarantined movement ids %q, want BIG-A and BIG-B", ids)
	}

	restarted := time.Now()
	h = raiseMaxPayload(t, h, 1<<20)
	a.waitFor(t, "reconnected", func(st *status.Status) bool { return reconnectedSince(st, restarted) })

	// A local redrive delivers A exactly once.
	const localWhy = "central max_payload raised to 1 MiB"
	if out := mustAgent(t, "dlq", "redrive", keyA, "--reason-text", localWhy, "--data-dir", a.dir); !strings.Contains(out, "redriven 1 movement(s)") {
		t.Errorf("local redrive:\n%s", out)
	}
	a.waitFor(t, "A synced", func(st *status.Status) bool { return st.Counts.Synced.Total == 4 })

	// The same again, remotely, for B.
	out := mustCLI(t, "remote", "list", "--store", liveStore, "--nkey", seedFile, "--server", h.URL())
	if !strings.Contains(out, keyB) || strings.Contains(out, keyA) || !strings.Contains(out, "permanent:too_large") {
		t.Errorf("remote list, want B only:\n%s", out)
	}
	const remoteWhy = "remote: central max_payload raised"
	out = mustCLI(t, "remote", "redrive", "--store", liveStore, keyB, "--reason-text", remoteWhy, "--nkey", seedFile, "--server", h.URL())
	if !strings.Contains(out, "redriven 1 movement(s)") || !strings.Contains(out, "remote:"+pub) {
		t.Errorf("remote redrive:\n%s", out)
	}
	a.waitFor(t, "B synced", func(st *status.Status) bool {
		return st.Counts.Synced.Total == 5 && st.Counts.Quarantined.Total == 0
	})

	// Again, locally and remotely: nothing to do.
	if stdout, stderr, code := agentCLI(t, "dlq", "redrive", keyA, "--reason-text", "again", "--data-dir", a.dir); code != 1 || !strings.Contains(stdout, "it is synced") {
		t.Errorf("local redrive of a synced key: exit %d\n%s%s", code, stdout, stderr)
	}
	if stdout, stderr, code := runCLI(t, "remote", "redrive", "--store", liveStore, keyB, "--reason-text", "again", "--nkey", seedFile, "--server", h.URL()); code != 1 || !strings.Contains(stdout, "it is synced") {
		t.Errorf("remote redrive of a synced key: exit %d\n%s%s", code, stdout, stderr)
	}
	// A key the store does not trust is refused.
	otherSeed, otherPub := ledgertest.OperatorFile(t)
	if stdout, stderr, code := runCLI(t, "remote", "redrive", "--store", liveStore, "--all", "--reason-text", "x", "--nkey", otherSeed, "--server", h.URL()); code != 1 || !strings.Contains(stderr, "unknown key") {
		t.Errorf("remote redrive with an unknown key: exit %d\n%s%s", code, stdout, stderr)
	}

	// Central holds each movement exactly once.
	msgs, subjects := centralSubjects(t, h.URL())
	if msgs != 5 || len(subjects) != 5 {
		t.Errorf("central holds %d messages on %d subjects, want 5 and 5", msgs, len(subjects))
	}
	for _, k := range []string{keyA, keyB} {
		if n := subjects[central.Subject(liveStore, k)]; n != 1 {
			t.Errorf("central holds %s %d times, want once", k, n)
		}
	}

	// The journal shows both, with who and why.
	var audit dlq.AuditResult
	if err := json.Unmarshal([]byte(mustAgent(t, "audit", "--json", "--data-dir", a.dir)), &audit); err != nil {
		t.Fatal(err)
	}
	var redrives, accepted, refusals []queue.Event
	for _, e := range audit.Events {
		switch e.Action {
		case queue.ActionRedrive:
			redrives = append(redrives, e)
		case remote.ActionRemote:
			if e.Detail["cmd"] == command.CmdDLQRedrive { // signed reads are journalled too
				accepted = append(accepted, e)
			}
		case queue.ActionRefused:
			refusals = append(refusals, e)
		}
	}
	if len(redrives) != 2 ||
		redrives[0].Actor != control.LocalActor() || redrives[0].Reason != localWhy || !slices.Equal(redrives[0].Keys, []string{keyA}) ||
		redrives[1].Actor != "remote:"+pub || redrives[1].Reason != remoteWhy || !slices.Equal(redrives[1].Keys, []string{keyB}) {
		t.Errorf("redrives journalled: %+v\nwant A by %s (%q), then B by remote:%s (%q)", redrives, control.LocalActor(), localWhy, pub, remoteWhy)
	}
	if len(accepted) != 2 || accepted[0].Actor != "remote:"+pub || accepted[0].Detail["nonce"] == "" || accepted[0].Detail["cmd"] != command.CmdDLQRedrive || accepted[0].Reason != remoteWhy {
		t.Errorf("accepted remote commands journalled: %+v, want two redrives by the operator, with nonces", accepted)
	}
	if len(refusals) != 1 || refusals[0].Actor != remote.ActorUnverified || refusals[0].Reason != "unknown key" {
		t.Errorf("refusals journalled: %+v, want one of %s (not %s), unknown key", refusals, remote.ActorUnverified, otherPub)
	}

	// Named in the configuration, the operator shows by name.
	cfg := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "store_id: %s\ndata_dir: %s\ncontrol:\n  operators:\n    alice: %s\n", liveStore, a.dir, pub), 0o600); err != nil {
		t.Fatal(err)
	}
	out = mustAgent(t, "audit", "--config", cfg, "--actor", "ALICE", "--action", "redrive")
	if !strings.Contains(out, "remote:alice ("+pub+")") || strings.Contains(out, control.LocalActor()+" ") {
		t.Errorf("audit --actor alice:\n%s", out)
	}
	audit = dlq.AuditResult{}
	if err := json.Unmarshal([]byte(mustAgent(t, "audit", "--json", "--config", cfg, "--key", keyB[:8], "--action", "redrive")), &audit); err != nil ||
		len(audit.Events) != 1 || audit.Events[0].Actor != "remote:alice ("+pub+")" {
		t.Errorf("audit --key of B: %v %+v", err, audit.Events)
	}

	// The remote views agree, and nothing needs attention.
	var st status.Status
	if err := json.Unmarshal([]byte(mustCLI(t, "remote", "status", "--store", liveStore, "--json", "--nkey", seedFile, "--server", h.URL())), &st); err != nil {
		t.Fatal(err)
	}
	if st.StoreID != liveStore || st.Counts.Synced.Total != 5 || st.Connection.State != status.Online {
		t.Errorf("remote status: store %s, %d synced, %s", st.StoreID, st.Counts.Synced.Total, st.Connection.State)
	}
	// The agent writes its summary with its next heartbeat.
	pollUntil(t, "the store in the fleet view", func() bool {
		out, _, _ = runCLI(t, "remote", "status", "--fleet", "--server", h.URL())
		return strings.Contains(out, liveStore+"  ok") && strings.Contains(out, "1 store(s)")
	})
}

// TestNoPatientDataAnywhere checks DESIGN P6 over a full flow of the
// running agent: movements whose rx_ref and note hold a marker are
// submitted, refused, synced, quarantined, listed, redriven locally and
// remotely, and the marker appears in no log line, metric, heartbeat,
// status (local or remote), CLI output or error text; it does appear where
// it belongs, in `dlq show --payload`.
func TestNoPatientDataAnywhere(t *testing.T) {
	const marker = "PATIENT-MARKER-4471"
	h := natstest.StartHub(t, natstest.WithMaxPayload(2048))
	seedFile, pub := ledgertest.OperatorFile(t)

	// Heartbeats are status output too.
	watcher := natstest.Connect(t, h.URL())
	beats := &syncbuf.Buffer{}
	if _, err := watcher.Subscribe("rx.status.>", func(m *nats.Msg) { beats.Write(append(m.Data, '\n')) }); err != nil {
		t.Fatal(err)
	}
	a := startLiveAgent(t, h.URL(), pub)

	var seen []string // everything that must not hold the marker
	add := func(what, s string) { seen = append(seen, what+": "+s) }
	run := func(args ...string) string {
		t.Helper()
		cmd, program := runCLI, "hq "
		if args[0] != "remote" {
			cmd, program = agentCLI, "agent "
		}
		stdout, stderr, _ := cmd(t, args...)
		add(program+strings.Join(args, " "), stdout+stderr)
		return stdout
	}

	code, body := a.post(t, "["+liveMovement("OK-1", "RX-"+marker, "note "+marker)+","+
		bigMovement("BIG-A", "RX-"+marker, marker+" ")+","+bigMovement("BIG-B", marker, "for "+marker+" ")+"]")
	if code != http.StatusAccepted {
		t.Fatalf("submission: %d %s", code, body)
	}
	add("accepted submission", body)
	keys := submitted(t, body)

	// Refused submissions.
	for name, sub := range map[string]string{
		"invalid":       strings.Replace(liveMovement("BAD-1", "RX-"+marker, marker), "12345-6789-01", marker, 1),
		"conflict":      liveMovement("OK-1", "RX-"+marker, "changed "+marker),
		"unknown field": strings.Replace(liveMovement("BAD-2", "RX-"+marker, marker), `"note"`, `"patient":"`+marker+`","note"`, 1),
		"not json":      `{"movement_id":"BAD-3","rx_ref":"` + marker,
	} {
		code, body := a.post(t, sub)
		if code < 400 {
			t.Errorf("%s submission accepted: %d %s", name, code, body)
		}
		add("refused submission ("+name+")", body)
	}

	a.waitFor(t, "1 synced and 2 quarantined", func(st *status.Status) bool {
		return st.Counts.Synced.Total == 1 && st.Counts.Quarantined.Total == 2
	})
	run("status", "--json", "--data-dir", a.dir)
	run("status", "--data-dir", a.dir)
	run("dlq", "list", "--data-dir", a.dir)
	run("dlq", "list", "--json", "--data-dir", a.dir)
	run("dlq", "show", keys["BIG-A"], "--data-dir", a.dir)
	run("dlq", "show", keys["BIG-A"], "--json", "--data-dir", a.dir) // the failure context
	// Positive control: the payload holds the marker, and shows it when asked.
	if out := mustAgent(t, "dlq", "show", keys["BIG-A"], "--payload", "--data-dir", a.dir); !strings.Contains(out, marker) {
		t.Fatalf("dlq show --payload lacks the marker: the test could not fail\n%s", out)
	}

	restarted := time.Now()
	h = raiseMaxPayload(t, h, 1<<20)
	a.waitFor(t, "reconnected", func(st *status.Status) bool { return reconnectedSince(st, restarted) })
	watcher = natstest.Connect(t, h.URL())
	if _, err := watcher.Subscribe("rx.status.>", func(m *nats.Msg) { beats.Write(append(m.Data, '\n')) }); err != nil {
		t.Fatal(err)
	}

	run("remote", "status", "--store", liveStore, "--json", "--nkey", seedFile, "--server", h.URL())
	run("remote", "status", "--store", liveStore, "--nkey", seedFile, "--server", h.URL())
	run("remote", "status", "--fleet", "--json", "--server", h.URL())
	run("remote", "list", "--store", liveStore, "--json", "--nkey", seedFile, "--server", h.URL())
	run("dlq", "redrive", keys["BIG-A"], "--reason-text", "limit raised", "--data-dir", a.dir)
	run("remote", "redrive", "--store", liveStore, keys["BIG-B"], "--reason-text", "limit raised", "--nkey", seedFile, "--server", h.URL(), "--json")
	run("remote", "redrive", "--store", liveStore, keys["BIG-B"], "--reason-text", "again", "--nkey", seedFile, "--server", h.URL())
	otherSeed, _ := ledgertest.OperatorFile(t)
	run("remote", "redrive", "--store", liveStore, "--all", "--reason-text", "refused", "--nkey", otherSeed, "--server", h.URL())
	run("remote", "status", "--store", "S9999", "--wait", "300ms", "--nkey", seedFile, "--server", h.URL())
	a.waitFor(t, "3 synced", func(st *status.Status) bool { return st.Counts.Synced.Total == 3 })
	run("status", "--json", "--data-dir", a.dir)
	run("audit", "--json", "--data-dir", a.dir)
	run("audit", "--data-dir", a.dir)
	time.Sleep(300 * time.Millisecond) // one more heartbeat after the redrives

	add("metrics", a.get(t, "/metrics"))
	add("GET /v1/status", a.get(t, "/v1/status"))
	add("heartbeats", beats.String())
	if !strings.Contains(beats.String(), `"store_id":"`+liveStore+`"`) {
		t.Errorf("no heartbeat was captured: the check of heartbeats is empty")
	}
	for _, line := range strings.Split(a.logs.String(), "\n") {
		add("log", line)
	}
	if !strings.Contains(a.logs.String(), "REMOTE_REDRIVE") {
		t.Errorf("the log has no REMOTE_REDRIVE line: the remote redrive was not logged")
	}

	for _, s := range seen {
		if strings.Contains(s, marker) {
			t.Errorf("patient data outside the payload in %s", s)
		}
	}
}
