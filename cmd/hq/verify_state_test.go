package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/testkit/agentbin"
	"github.com/rxedge/agent/testkit/ledgertest"
	"github.com/rxedge/agent/testkit/natstest"
)

// stateRig is a real central holding one store's signed log, the store
// answering the signed ledger command, and the built hq.
type stateRig struct {
	ctx                    context.Context
	js                     jetstream.JetStream
	store                  *ledgertest.Store
	bin, url, seed, roster string
	state                  string
}

// newStateRig archives two rounds of 20 movements and a checkpoint of
// store S0042 (42 records) on a new central.
func newStateRig(t *testing.T) *stateRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	srv := natstest.StartHub(t)
	nc := natstest.Connect(t, srv.URL())
	r := &stateRig{ctx: ctx, js: natstest.JetStream(t, nc), store: ledgertest.NewStore(t, "S0042"), bin: agentbin.BuildHQ(t), url: srv.URL()}
	dir := t.TempDir()
	seed, pub := ledgertest.Operator(t)
	r.seed, r.roster, r.state = filepath.Join(dir, "operator.nk"), filepath.Join(dir, "roster.txt"), filepath.Join(dir, "verify.state")
	if err := os.WriteFile(r.seed, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.roster, []byte(r.store.RosterLine()), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r.store.Movements(ctx, t, r.js, 20)
		r.store.Checkpoint(ctx, t, r.js)
	}
	r.store.Respond(t, nc, pub)
	ledgertest.WaitArchived(ctx, t, r.js, central.ArchiveStreamName, 42)
	return r
}

// args are hq verify's arguments with the state, and extra.
func (r *stateRig) args(extra ...string) []string {
	return append([]string{"verify", "--nkey", r.seed, "--server", r.url, "--roster", r.roster, "--state", r.state}, extra...)
}

// verify runs hq verify --state --json and reads its report.
func (r *stateRig) verify(t *testing.T, extra ...string) (int, audit.Report, string) {
	t.Helper()
	code, out, errs := hqRun(t, r.bin, r.args(append([]string{"--json"}, extra...)...)...)
	var rep audit.Report
	if code == 0 || code == cli.ExitAttention {
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("verify --json printed %q: %v\n%s", out, err, errs)
		}
	}
	return code, rep, errs
}

// TestVerifyStateThroughTheBinary runs hq verify --state as an
// installation does, against a real nats-server whose store answers the
// signed ledger command: the first pass reads every record, the second
// only those archived since, --store with --state is a usage error, a
// deleted state file makes the next pass a full one, and an archive
// rewritten under a verified position (one movement altered, its digest
// recomputed) is a finding at the next pass.
func TestVerifyStateThroughTheBinary(t *testing.T) {
	r := newStateRig(t)
	const first = 20 + 1 + 20 + 1
	verify := func(extra ...string) (int, audit.Report, string) { t.Helper(); return r.verify(t, extra...) }
	code, rep, errs := verify()
	if code != 0 || !rep.OK() || rep.Records != first || rep.Incremental {
		t.Fatalf("first pass: exit %d, %d records read (incremental %v), want exit 0 and %d\n%s", code, rep.Records, rep.Incremental, first, errs)
	}
	fi, err := os.Stat(r.state)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file after the first pass: %v, %v; want mode 0600", fi, err)
	}

	const more = 10 + 1
	r.store.Movements(r.ctx, t, r.js, 10)
	r.store.Checkpoint(r.ctx, t, r.js)
	ledgertest.WaitArchived(r.ctx, t, r.js, central.ArchiveStreamName, first+more)
	code, rep, errs = verify("--recheck-budget", "0")
	if code != 0 || !rep.OK() || rep.Records != more || !rep.Incremental || rep.Rechecked != 0 {
		t.Fatalf("second pass: exit %d, %d records read, %d re-checked (incremental %v), want exit 0, %d and 0\n%s",
			code, rep.Records, rep.Rechecked, rep.Incremental, more, errs)
	}
	// With the default budget the rolling re-check reads again what was
	// verified, and says how much.
	code, rep, errs = verify()
	if code != 0 || rep.Records != 0 || rep.Rechecked == 0 {
		t.Fatalf("pass with the re-check: exit %d, %d records read, %d re-checked, want 0 read and some re-checked\n%s", code, rep.Records, rep.Rechecked, errs)
	}

	code, _, errs = hqRun(t, r.bin, r.args("--store", "S0042")...)
	if code != cli.ExitUsage || !strings.Contains(errs, "--state") {
		t.Errorf("--store with --state: exit %d, %q; want %d naming --state", code, errs, cli.ExitUsage)
	}
	code, out, _ := hqRun(t, r.bin, r.args("--recheck-budget", "0")...)
	if code != 0 || !strings.Contains(out, "incremental: 0 records new since the saved state") {
		t.Errorf("table of an incremental pass: exit %d\n%s", code, out)
	}

	// A deleted state: the next pass is a full one, and saves a state.
	if err := os.Remove(r.state); err != nil {
		t.Fatal(err)
	}
	code, rep, errs = verify()
	if code != 0 || rep.Records != first+more || rep.Incremental {
		t.Fatalf("after the state was deleted: exit %d, %d records read, want a full pass of %d\n%s", code, rep.Records, first+more, errs)
	}

	// Central's administrator recreates the archive with sequence 7
	// altered and its digest recomputed.
	altered := 0
	ledgertest.RewriteArchive(r.ctx, t, r.js, central.ArchiveStreamName, func(recs []ledgertest.Record) []ledgertest.Record {
		for i := range recs {
			if recs[i].Subject == central.ArchiveSubject("S0042") && recs[i].Seq() == 7 {
				recs[i].SetPayload(bytes.Replace(recs[i].Data, []byte(`"qty":7}`), []byte(`"qty":70}`), 1))
				altered++
			}
		}
		return recs
	})
	if altered != 1 {
		t.Fatalf("the rewrite altered %d records, want 1", altered)
	}
	code, rep, errs = verify("--recheck-budget", "0")
	if code != cli.ExitAttention || rep.OK() || rep.Counts[audit.KindAltered] != 1 || rep.Counts[audit.KindArchiveRewritten] != 1 {
		t.Fatalf("after the rewrite: exit %d, counts %v, want %d with one %s and one %s\n%s",
			code, rep.Counts, cli.ExitAttention, audit.KindAltered, audit.KindArchiveRewritten, errs)
	}
	for _, f := range rep.Findings {
		if f.Kind == audit.KindAltered && (f.Store != "S0042" || f.From != 7 || f.To != 7) {
			t.Errorf("finding %+v, want S0042 sequence 7", f)
		}
	}
}
