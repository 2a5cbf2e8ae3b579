//go:build unix

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/headoffice/service"
	"github.com/rxedge/agent/headoffice/sink"
	"github.com/rxedge/agent/testkit/ledgertest"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// doctorSecrets are every password and key of the doctor's test: none
// may be printed.
var doctorSecrets = []string{"CHANGE-ME-audit", "CHANGE-ME-witness", "CHANGE-ME-ops", "insider-pw", "sink-pw", "report-pw", "owner-pw"}

// doctorRig is central run with the generated production configuration
// (and an insider user without limits), a real PostgreSQL with the
// sink's grants file applied, a roster and a witness key.
type doctorRig struct {
	dir, url, key, vkey, roster string
	pg                          *pgtest.Server
}

func newDoctorRig(t *testing.T) *doctorRig {
	t.Helper()
	r := &doctorRig{dir: t.TempDir()}
	var conf bytes.Buffer
	if err := provision.CentralConfig(&conf, []string{"S0001"}, 1); err != nil {
		t.Fatal(err)
	}
	const users = "  RX {\n    jetstream: enabled\n    users: [\n"
	text := strings.Replace(conf.String(), users, users+"      { user: insider, password: \"insider-pw\" }\n", 1)
	r.url = natstest.StartHub(t, natstest.WithConfigFile(writeFile(t, filepath.Join(r.dir, "central.conf"), text), adminConnect...)).URL()
	// One message in the archive, for the doctor to read: the insider
	// publishes it on a store's subject, and central archives it.
	js := natstest.JetStream(t, natstest.Connect(t, r.url, nats.UserInfo("insider", "insider-pw")))
	pctx, pcancel := context.WithTimeout(context.Background(), time.Minute)
	defer pcancel()
	if _, err := js.Publish(pctx, central.Subject("S0001", strings.Repeat("a", 32)), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	for {
		st, err := js.Stream(pctx, central.ArchiveStreamName)
		if err == nil && st.CachedInfo().State.Msgs == 1 {
			break
		}
		if pctx.Err() != nil {
			t.Fatalf("the insider's message not archived within a minute: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // polled: central's sourcing into the archive
	}
	r.pg = pgtest.Start(t)
	for _, role := range []string{"rxedge_owner LOGIN PASSWORD 'owner-pw'", "rxedge_sink LOGIN PASSWORD 'sink-pw'", "rxedge_report LOGIN PASSWORD 'report-pw'"} {
		r.pg.Exec(t, "postgres", `CREATE ROLE `+role)
	}
	r.pg.Exec(t, "postgres", `CREATE DATABASE rxedge OWNER rxedge_owner`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	owner, err := pgx.Connect(ctx, r.pg.URL("rxedge_owner", "owner-pw", "rxedge"))
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	if _, err := sink.Migrate(ctx, owner); err != nil {
		t.Fatal(err)
	}
	grants, err := os.ReadFile(filepath.Join("..", "..", "configs", "postgres", "sink-grants.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Exec(ctx, string(grants)); err != nil {
		t.Fatal(err)
	}
	skey, vkey, err := audit.GenerateWitnessKey(rand.Reader, "")
	if err != nil {
		t.Fatal(err)
	}
	r.key, r.vkey = writeFile(t, filepath.Join(r.dir, "witness.key"), skey+"\n"), vkey
	r.roster = writeFile(t, filepath.Join(r.dir, "roster"), ledgertest.NewStore(t, "S0001").RosterLine())
	return r
}

// settings writes hq.yaml with the PostgreSQL and audit identities given.
func (r *doctorRig) settings(t *testing.T, pgUser, pgPassword, auditUser, auditPassword string) string {
	t.Helper()
	pw := func(name, v string) string { return writeFile(t, filepath.Join(r.dir, name), v+"\n") }
	return writeFile(t, filepath.Join(r.dir, "hq-"+pgUser+"-"+auditUser+".yaml"), fmt.Sprintf(`state_dir: %s
roster: %s
postgres:
  url: %s
  password: {file: %s}
nats:
  servers: %s
  partitions: 1
  audit: {user: %s, password: {file: %s}, js_api_prefix: rx.audit.api.}
  witness: {user: witness, password: {file: %s}, js_api_prefix: rx.witness-api.}
  ops: {user: ops, password: {file: %s}}
witness: {signing_key: {file: %s}, public_key: %s}
`, r.dir, r.roster, r.pg.URL(pgUser, "", "rxedge"), pw(pgUser+".pw", pgPassword),
		r.url, auditUser, pw(auditUser+".pw", auditPassword), pw("witness.pw", "CHANGE-ME-witness"), pw("ops.pw", "CHANGE-ME-ops"), r.key, r.vkey))
}

// doctor runs hq doctor on config, as JSON and as text, and finds no
// secret in what it printed.
func doctor(t *testing.T, config string) (service.DoctorReport, string, int) {
	t.Helper()
	out, errs, code := runCLI(t, "doctor", "--config", config, "--json")
	var rep service.DoctorReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("hq doctor --json: %v\n%s\n%s", err, out, errs)
	}
	text, _, _ := runCLI(t, "doctor", "--config", config)
	for _, s := range doctorSecrets {
		if strings.Contains(out+errs+text, s) {
			t.Errorf("hq doctor printed the secret %q:\n%s", s, out+errs+text)
		}
	}
	return rep, text, code
}

// TestDoctor runs hq doctor against central run with the generated
// production configuration and a real PostgreSQL with the sink's grants
// file applied. With the settings as a head office writes them it is
// ready (exit 0); with the witness key readable by others, a PostgreSQL
// user without the grants and an audit identity that may publish on the
// stores' subjects (and reads JetStream under another prefix), each of
// those checks fails with its fix (exit 3); no secret is printed.
func TestDoctor(t *testing.T) {
	r := newDoctorRig(t)
	rep, text, code := doctor(t, r.settings(t, "rxedge_sink", "sink-pw", "audit", "CHANGE-ME-audit"))
	if code != 0 || !rep.Ready || len(rep.Checks) < 9 {
		t.Fatalf("hq doctor of a ready head office: exit %d, %d checks:\n%s", code, len(rep.Checks), text)
	}
	for _, c := range rep.Checks {
		if !c.OK {
			t.Errorf("check %q not OK: %s", c.Name, c.Detail)
		}
		if c.Name == "nats.audit reads the archives" && !strings.Contains(c.Detail, "RX_ARCHIVE (1 messages)") {
			t.Errorf("the archives read: %s; want RX_ARCHIVE's one message", c.Detail)
		}
	}

	if err := os.Chmod(r.key, 0o644); err != nil {
		t.Fatal(err)
	}
	rep, text, code = doctor(t, r.settings(t, "rxedge_report", "report-pw", "insider", "insider-pw"))
	failed := map[string]service.Check{}
	for _, c := range rep.Checks {
		if !c.OK && !c.Warning {
			failed[c.Name] = c
		}
	}
	if code != 3 || rep.Ready {
		t.Errorf("hq doctor of a broken head office: exit %d, ready %v; want 3, not ready:\n%s", code, rep.Ready, text)
	}
	for name, fix := range map[string]string{
		"witness key":     "chmod 600 " + r.key,
		"postgres grants": "sink-grants.sql",
		"nats.audit cannot publish on the stores' subjects": "hq central-config",
		// The insider's JetStream API is not the audit user's prefix.
		"nats.audit reads the archives": "js_api_prefix",
	} {
		if c, ok := failed[name]; !ok || !strings.Contains(c.Fix, fix) {
			t.Errorf("check %q: failed %v, fix %q; want its fix to say %q:\n%s", name, ok, c.Fix, fix, text)
		}
	}
	if len(failed) != 4 {
		t.Errorf("%d checks failed, want the 4 broken:\n%s", len(failed), text)
	}
}
