package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/testkit/agentbin"
	"github.com/rxedge/agent/testkit/ledgertest"
	"github.com/rxedge/agent/testkit/natstest"
)

// hqRun runs the built hq binary and returns its exit code, stdout and
// stderr.
func hqRun(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errb.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	}
	t.Fatalf("run hq %v: %v", args, err)
	return 0, "", ""
}

// TestLedgerCommandsThroughTheBinary runs verify, prove, verify-proof,
// witness-key and witness as an installation does, against a real
// nats-server whose stores answer the signed ledger command: exit codes,
// --json, and an archive recreated without one movement.
func TestLedgerCommandsThroughTheBinary(t *testing.T) {
	bin := agentbin.BuildHQ(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := natstest.StartHub(t)
	nc := natstest.Connect(t, srv.URL())
	js := natstest.JetStream(t, nc)
	dir := t.TempDir()
	seed, pub := ledgertest.Operator(t)
	seedFile := filepath.Join(dir, "operator.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	a, b := ledgertest.NewStore(t, "S0042"), ledgertest.NewStore(t, "S0043")
	for _, n := range []int{20, 20, 10} {
		a.Movements(ctx, t, js, n)
		a.Checkpoint(ctx, t, js)
	}
	b.Movements(ctx, t, js, 5)
	b.Checkpoint(ctx, t, js)
	a.Respond(t, nc, pub)
	b.Respond(t, nc, pub)
	ledgertest.WaitArchived(ctx, t, js, central.ArchiveStreamName, 50+3+5+1)
	roster := filepath.Join(dir, "roster.txt")
	if err := os.WriteFile(roster, []byte(a.RosterLine()+b.RosterLine()), 0o600); err != nil {
		t.Fatal(err)
	}
	conn := []string{"--server", srv.URL(), "--roster", roster}
	verify := func(extra ...string) (int, audit.Report, string) {
		t.Helper()
		code, out, errs := hqRun(t, bin, append(append([]string{"verify", "--json", "--nkey", seedFile}, conn...), extra...)...)
		var rep audit.Report
		if code == 0 || code == cli.ExitAttention {
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("verify --json printed %q: %v", out, err)
			}
		}
		return code, rep, errs
	}

	code, rep, errs := verify()
	if code != 0 || !rep.OK() || rep.Movements != 55 || len(rep.Notes) != 0 {
		t.Fatalf("untouched: exit %d, %+v\n%s", code, rep, errs)
	}
	for _, l := range rep.Logs {
		if l.StoreLatest != l.Latest || l.Matched != l.Latest {
			t.Fatalf("untouched: log %+v not compared with the store's answer", l)
		}
	}

	// Usage errors: no roster, no operator key.
	if code, _, _ := hqRun(t, bin, "verify", "--server", srv.URL(), "--nkey", seedFile); code != cli.ExitUsage {
		t.Errorf("verify without --roster: exit %d", code)
	}
	if code, _, _ := hqRun(t, bin, append([]string{"verify"}, conn...)...); code != cli.ExitUsage {
		t.Errorf("verify without --nkey: exit %d", code)
	}
	// Another operator's key: the stores refuse, verify says so and still
	// checks the archive.
	otherSeed, _ := ledgertest.Operator(t)
	otherFile := filepath.Join(dir, "other.nk")
	os.WriteFile(otherFile, otherSeed, 0o600)
	code, out, _ := hqRun(t, bin, append([]string{"verify", "--nkey", otherFile}, conn...)...)
	if code != 0 || !strings.Contains(out, "store S0042 did not answer") || !strings.Contains(out, "OK: every log holds") {
		t.Errorf("another operator: exit %d\n%s", code, out)
	}

	// The inspector's proof of sequence 33, and its offline check.
	key := ledgertest.Key("S0042", 32)
	proof := filepath.Join(dir, "proof.json")
	if code, _, errs := hqRun(t, bin, "prove", key, "--store", "S0042", "--roster", roster, "--server", srv.URL(), "--out", proof); code != 0 {
		t.Fatalf("prove: exit %d: %s", code, errs)
	}
	// Without the roster no checkpoint can be authenticated: nothing is
	// written.
	noRoster := filepath.Join(dir, "no-roster.json")
	code, _, errs = hqRun(t, bin, "prove", key, "--store", "S0042", "--server", srv.URL(), "--out", noRoster)
	if _, err := os.Stat(noRoster); code != cli.ExitUsage || !strings.Contains(errs, "--roster") || err == nil {
		t.Errorf("prove without --roster: exit %d, %s", code, errs)
	}
	vkeyFile := filepath.Join(dir, "S0042.pub")
	os.WriteFile(vkeyFile, []byte(a.VKey+"\n"), 0o644)
	code, out, _ = hqRun(t, bin, "verify-proof", proof, "--store-key", vkeyFile)
	if code != 0 || !strings.Contains(out, "is sequence 33 of store S0042") {
		t.Fatalf("verify-proof: exit %d: %s", code, out)
	}
	if code, _, _ := hqRun(t, bin, "verify-proof", proof, "--store-key", b.VKey); code != cli.ExitAttention {
		t.Errorf("verify-proof with S0043's key: exit %d", code)
	}
	pb, _ := os.ReadFile(proof)
	edited := filepath.Join(dir, "edited.json")
	os.WriteFile(edited, bytes.Replace(pb, []byte(`\"qty\":33`), []byte(`\"qty\":3`), 1), 0o644)
	code, out, _ = hqRun(t, bin, "verify-proof", edited, "--store-key", a.VKey, "--json")
	var res struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if code != cli.ExitAttention || json.Unmarshal([]byte(out), &res) != nil || res.OK || !strings.Contains(res.Error, "payload was changed") {
		t.Errorf("edited proof: exit %d: %s", code, out)
	}
	if code, _, _ := hqRun(t, bin, "verify-proof", proof); code != cli.ExitUsage {
		t.Errorf("verify-proof without --store-key: exit %d", code)
	}

	// The witness: key, one pass, and verify with its key.
	wkey := filepath.Join(dir, "witness.key")
	code, wpub, _ := hqRun(t, bin, "witness-key", "--out", wkey)
	if code != 0 || !strings.HasPrefix(wpub, "rxedge-witness+") {
		t.Fatalf("witness-key: exit %d: %q", code, wpub)
	}
	if code, _, _ := hqRun(t, bin, "witness-key", "--out", wkey); code != cli.ExitError {
		t.Errorf("witness-key over an existing key: exit %d", code)
	}
	state := filepath.Join(dir, "witness.json")
	code, out, errs = hqRun(t, bin, "witness", "--once", "--json", "--signing-key", wkey, "--state", state, "--roster", roster, "--server", srv.URL())
	var run audit.WitnessRun
	if code != 0 || json.Unmarshal([]byte(out), &run) != nil || run.Countersigned != 4 {
		t.Fatalf("witness --once: exit %d: %s %s", code, out, errs)
	}
	code, rep, _ = verify("--witness-key", strings.TrimSpace(wpub))
	if code != 0 || rep.Logs[0].Witnessed != 50 {
		t.Fatalf("verify with the witness key: exit %d: %+v", code, rep.Logs)
	}
	wproof := filepath.Join(dir, "witnessed.json")
	if code, _, errs := hqRun(t, bin, "prove", key, "--store", "S0042", "--roster", roster, "--witness-key", strings.TrimSpace(wpub),
		"--server", srv.URL(), "--out", wproof); code != 0 {
		t.Fatalf("prove --witness-key: exit %d: %s", code, errs)
	}
	if code, out, _ := hqRun(t, bin, "verify-proof", wproof, "--store-key", a.VKey, "--witness-key", strings.TrimSpace(wpub)); code != 0 || !strings.Contains(out, "countersigned by the witness") {
		t.Errorf("verify-proof of the countersigned proof: exit %d: %s", code, out)
	}

	// An archive recreated without sequence 33.
	ledgertest.RewriteArchive(ctx, t, js, central.ArchiveStreamName, func(recs []ledgertest.Record) []ledgertest.Record {
		var out []ledgertest.Record
		for _, r := range recs {
			if r.Subject == central.ArchiveSubject("S0042") && r.Seq() == 33 {
				continue
			}
			out = append(out, r)
		}
		return out
	})
	code, rep, _ = verify()
	if code != cli.ExitAttention || rep.OK() || rep.Counts[audit.KindMissing] != 1 || len(rep.Findings) != 1 {
		t.Fatalf("one movement removed: exit %d: %+v", code, rep.Findings)
	}
	if f := rep.Findings[0]; f.Store != "S0042" || f.From != 33 || f.To != 33 || f.Log != a.Log {
		t.Errorf("finding %+v, want S0042 sequence 33", f)
	}
	code, out, _ = hqRun(t, bin, append([]string{"verify", "--nkey", seedFile}, conn...)...)
	if code != cli.ExitAttention || !strings.Contains(out, "missing: store S0042 log "+a.Log+" sequences 33-33") || !strings.Contains(out, "FAILED") {
		t.Errorf("table: exit %d\n%s", code, out)
	}
	// The proof made before still checks offline: it does not depend on
	// the archive.
	if code, _, _ := hqRun(t, bin, "verify-proof", proof, "--store-key", a.VKey, "--witness-key", strings.TrimSpace(wpub)); code != cli.ExitAttention {
		t.Errorf("the proof written before the witness ran has no countersignature: exit %d", code)
	}
	// Records under S0043's checkpoint tokens that no key signed, sizes
	// above its own: the table counts them, and prove passes over them
	// and says so.
	ledgertest.PublishUnsigned(ctx, t, js, "S0043", 20, func(i int) (string, int64) { return b.Log, int64(1000 + i) })
	ledgertest.WaitArchived(ctx, t, js, central.ArchiveStreamName, 50+3+5+1-1+20)
	code, out, _ = hqRun(t, bin, append([]string{"verify", "--nkey", seedFile}, conn...)...)
	if code != cli.ExitAttention || !strings.Contains(out, "unverified_checkpoint: store S0043 log "+b.Log+" sizes 1000: archive record") ||
		!strings.Contains(out, "(12 records): 12 more such records, 20 in all") || !strings.Contains(out, "4 signed checkpoints, 20 under checkpoint tokens not signed by their store") {
		t.Errorf("verify with unsigned checkpoint records: exit %d\n%s", code, out)
	}
	code, _, errs = hqRun(t, bin, "prove", ledgertest.Key("S0043", 2), "--store", "S0043", "--roster", roster, "--server", srv.URL(), "--out", proof)
	if code != 0 || !strings.Contains(errs, "note: 20 records under store S0043's checkpoint tokens are not checkpoints signed by a roster key") {
		t.Errorf("prove with unsigned checkpoint records: exit %d: %s", code, errs)
	}
	// The central is unreachable: an error, not a finding.
	srv.Stop()
	if code, _, _ := hqRun(t, bin, append([]string{"verify", "--no-ask", "--timeout", "1s"}, conn...)...); code != cli.ExitError {
		t.Errorf("central down: exit %d", code)
	}
}

// TestWitnessKilled kills hq witness with SIGKILL while it
// countersigns, restarts it, and checks that every checkpoint ends up
// countersigned once (one published but not saved before the kill is
// taken from RX_WITNESS at the restart, or repeated and deduplicated), its
// state agrees with the stream, and verify with its key holds.
func TestWitnessKilled(t *testing.T) {
	bin := agentbin.BuildHQ(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := natstest.StartHub(t)
	nc := natstest.Connect(t, srv.URL())
	js := natstest.JetStream(t, nc)
	dir := t.TempDir()
	s := ledgertest.NewStore(t, "S0042")
	const checkpoints = 300
	for i := 0; i < checkpoints; i++ {
		s.Movements(ctx, t, js, 1)
		s.Checkpoint(ctx, t, js)
	}
	ledgertest.WaitArchived(ctx, t, js, central.ArchiveStreamName, 2*checkpoints)
	roster := filepath.Join(dir, "roster.txt")
	os.WriteFile(roster, []byte(s.RosterLine()), 0o600)
	wkey := filepath.Join(dir, "witness.key")
	code, wpub, _ := hqRun(t, bin, "witness-key", "--out", wkey)
	if code != 0 {
		t.Fatal("witness-key failed")
	}
	state := filepath.Join(dir, "witness.json")
	args := []string{"witness", "--signing-key", wkey, "--state", state, "--roster", roster, "--server", srv.URL(), "--interval", "1h"}
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it once it has countersigned some, not all.
	deadline := time.Now().Add(time.Minute)
	for {
		st, err := js.Stream(ctx, central.WitnessStreamName)
		if err == nil && st.CachedInfo().State.Msgs >= 20 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("the witness countersigned fewer than 20 checkpoints in a minute")
		}
		time.Sleep(time.Millisecond) // polled: awaiting the witness's progress
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	st, _ := js.Stream(ctx, central.WitnessStreamName)
	killedAt := st.CachedInfo().State.Msgs
	code, out, errs := hqRun(t, bin, append([]string{"witness", "--once", "--json"}, args[1:len(args)-2]...)...)
	var run audit.WitnessRun
	if code != 0 || json.Unmarshal([]byte(out), &run) != nil || len(run.Refused) != 0 {
		t.Fatalf("after the kill: exit %d: %s %s", code, out, errs)
	}
	st, _ = js.Stream(ctx, central.WitnessStreamName)
	if n := st.CachedInfo().State.Msgs; n != checkpoints {
		t.Fatalf("killed at %d, the witness stream holds %d countersigned checkpoints after the restart, want %d", killedAt, n, checkpoints)
	}
	t.Logf("killed after %d countersignatures; the restart countersigned %d (%d again)", killedAt, run.Countersigned, int(run.Countersigned)-(checkpoints-int(killedAt)))
	seed, pub := ledgertest.Operator(t)
	s.Respond(t, nc, pub)
	seedFile := filepath.Join(dir, "op.nk")
	os.WriteFile(seedFile, seed, 0o600)
	code, out, _ = hqRun(t, bin, "verify", "--json", "--roster", roster, "--server", srv.URL(), "--nkey", seedFile, "--witness-key", strings.TrimSpace(wpub))
	var rep audit.Report
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Logs[0].Witnessed != checkpoints {
		t.Fatalf("verify after the kill: exit %d: %s", code, out)
	}
}
