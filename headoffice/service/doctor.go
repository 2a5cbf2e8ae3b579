package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/natsconn"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/headoffice/sink"
	"github.com/rxedge/agent/internal/redact"
)

// Check is the verdict on one thing hq run needs: OK, or what is wrong
// and its fix. A warning is not OK but does not keep the service from
// being ready.
type Check struct {
	Name    string `json:"name"`
	OK      bool   `json:"ok"`
	Detail  string `json:"detail"`
	Fix     string `json:"fix,omitempty"`
	Warning bool   `json:"warning,omitempty"`
}

// DoctorReport is every check, in order; Ready when each passed or
// warned.
type DoctorReport struct {
	Ready  bool    `json:"ready"`
	Checks []Check `json:"checks"`
}

// DefaultDoctorTimeout bounds each of the doctor's connections and
// questions.
const DefaultDoctorTimeout = 10 * time.Second

// maxKeyFile bounds the witness key file the doctor reads.
const maxKeyFile = 4 << 10

// Doctor checks what the service of s (checked: Settings.Check) needs:
// the roster, the witness key, PostgreSQL's reachability and the sink's
// grants, and each NATS identity's grants (it connects; the audit
// identity reads the archives; none may publish on the stores'
// subjects). Each connection and question is bounded by timeout. No
// check's text holds a secret.
func Doctor(ctx context.Context, s Settings, getenv func(string) string, timeout time.Duration) DoctorReport {
	if timeout <= 0 {
		timeout = DefaultDoctorTimeout
	}
	var checks []Check
	if s.Roster != "" {
		checks = append(checks, rosterCheck(s.Roster))
	}
	if On(s.Witness.Enabled) {
		checks = append(checks, witnessKeyCheck(s.Witness.SigningKey.Path(getenv), s.Witness.PublicKey))
	}
	if s.Postgres.URL != "" {
		checks = append(checks, postgresChecks(ctx, s, getenv, timeout)...)
	}
	ids := []struct {
		field string
		id    Identity
		on    bool
	}{
		{"nats.audit", s.NATS.Audit, true},
		{"nats.witness", s.NATS.Witness, On(s.Witness.Enabled)},
		{"nats.ops", s.NATS.Ops, On(s.Fleet.Enabled) || s.Console != nil},
	}
	for _, x := range ids {
		if x.on {
			checks = append(checks, natsChecks(ctx, s, x.field, x.id, getenv, timeout)...)
		}
	}
	rep := DoctorReport{Ready: true, Checks: checks}
	for _, c := range checks {
		rep.Ready = rep.Ready && (c.OK || c.Warning)
	}
	return rep
}

// rosterCheck parses the roster and finds a key for every store.
func rosterCheck(path string) Check {
	c := Check{Name: "roster"}
	r, err := provision.ParseRosterFile(path)
	if err != nil {
		c.Detail, c.Fix = err.Error(), "correct the roster: a store id and its ledger key a line (hq central-config's roster)"
		return c
	}
	var keyless []string
	for _, id := range r.Stores {
		if len(r.Keys(id)) == 0 {
			keyless = append(keyless, id)
		}
	}
	if len(keyless) > 0 {
		c.Detail = fmt.Sprintf("%d of %d store(s) have no ledger key: %s", len(keyless), len(r.Stores), firstFew(keyless))
		c.Fix = "add each store's ledger key after its id (agent status shows it as ledger.public_key)"
		return c
	}
	c.OK, c.Detail = true, fmt.Sprintf("%s: %d store(s), each with its key", path, len(r.Stores))
	return c
}

func firstFew(ids []string) string {
	if len(ids) > 5 {
		return strings.Join(ids[:5], ", ") + fmt.Sprintf(" and %d more", len(ids)-5)
	}
	return strings.Join(ids, ", ")
}

// witnessKeyCheck opens the witness's signing key once, checks on the
// descriptor that it is a regular file only its owner can read, reads it
// and finds it a note signer key whose signature the public key, when
// given, verifies.
func witnessKeyCheck(path, public string) Check {
	c := Check{Name: "witness key"}
	f, err := os.Open(path)
	if err != nil {
		c.Detail, c.Fix = fmt.Sprintf("cannot read witness.signing_key %s: %v", path, errors.Unwrap(err)), "make the file (hq witness-key) readable by the service's user"
		return c
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		c.Detail, c.Fix = fmt.Sprintf("witness.signing_key %s: %v", path, err), "make the file readable by the service's user"
		return c
	case !fi.Mode().IsRegular():
		c.Detail, c.Fix = fmt.Sprintf("witness.signing_key %s is not a regular file", path), "name the key file itself"
		return c
	case fi.Mode().Perm()&0o077 != 0:
		c.Detail, c.Fix = fmt.Sprintf("witness.signing_key %s has mode %04o: others than its owner can read the key", path, fi.Mode().Perm()), "chmod 600 "+path
		return c
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil || len(b) > maxKeyFile {
		c.Detail, c.Fix = fmt.Sprintf("witness.signing_key %s cannot be read whole, or is over %d bytes", path, maxKeyFile), "name the key hq witness-key wrote"
		return c
	}
	signer, err := note.NewSigner(strings.TrimSpace(string(b)))
	if err != nil {
		c.Detail, c.Fix = fmt.Sprintf("witness.signing_key %s is not a note signer key", path), "name the private key hq witness-key wrote"
		return c
	}
	if public != "" {
		v, err := note.NewVerifier(strings.TrimSpace(public))
		if err != nil {
			c.Detail, c.Fix = "witness.public_key is not a note verifier key", "give the public key hq witness-key printed"
			return c
		}
		msg, err := note.Sign(&note.Note{Text: "rxedge hq doctor\n"}, signer)
		if err == nil {
			_, err = note.Open(msg, note.VerifierList(v))
		}
		if err != nil {
			c.Detail = fmt.Sprintf("witness.public_key (%s) does not verify what witness.signing_key (%s) signs", v.Name(), signer.Name())
			c.Fix = "give the public key of the same hq witness-key run as the private key"
			return c
		}
	}
	c.OK, c.Detail = true, fmt.Sprintf("%s: %s, mode %04o", path, signer.Name(), fi.Mode().Perm())
	return c
}

// sinkGrants are what configs/postgres/sink-grants.sql gives the sink's
// user: the privileges hq run's jobs use, table by table.
var sinkGrants = []struct{ table, privs string }{
	{"sink_schema", "SELECT"},
	{"movements", "SELECT,INSERT"}, {"movement_repeats", "SELECT,INSERT"},
	{"movement_conflicts", "SELECT,INSERT"}, {"sink_rejects", "SELECT,INSERT"},
	{"sink_positions", "SELECT,INSERT,UPDATE"},
	{"verify_state", "SELECT,INSERT,UPDATE"}, {"verify_findings", "SELECT,INSERT,UPDATE"},
}

// postgresChecks connects to the database and checks the sink's grants.
func postgresChecks(ctx context.Context, s Settings, getenv func(string) string, timeout time.Duration) []Check {
	reach := Check{Name: "postgres"}
	var set sink.Settings
	set.Postgres.URL, set.Postgres.PasswordFile = s.Postgres.URL, s.Postgres.Password.Path(getenv)
	cfg, err := set.PostgresConfig()
	if err != nil {
		reach.Detail, reach.Fix = err.Error(), "correct postgres.url and postgres.password"
		return []Check{reach}
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg.ConnConfig)
	if err != nil {
		reach.Detail = fmt.Sprintf("cannot connect to %s as %s within %s: %s", cfg.ConnConfig.Host, cfg.ConnConfig.User, timeout, redact.Error(err, cfg.ConnConfig.Password))
		reach.Fix = "check postgres.url, the password, that the server runs and that pg_hba.conf lets this host in"
		return []Check{reach}
	}
	defer conn.Close(context.WithoutCancel(ctx))
	reach.OK, reach.Detail = true, fmt.Sprintf("%s, database %s, as %s", cfg.ConnConfig.Host, cfg.ConnConfig.Database, cfg.ConnConfig.User)
	return []Check{reach, grantsCheck(cctx, conn, cfg.ConnConfig.User)}
}

// grantsCheck finds each of sinkGrants held, and warns of a user that
// may change or remove the records (the sink's are append-only).
func grantsCheck(ctx context.Context, conn *pgx.Conn, user string) Check {
	c := Check{Name: "postgres grants"}
	const fix = "run configs/postgres/sink-grants.sql as the schema's owner (after hq sink --migrate-only)"
	var missing, schema []string
	for _, g := range sinkGrants {
		var exists, held bool
		err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL,
			to_regclass($1) IS NOT NULL AND has_table_privilege(current_user, $1, $2)`, g.table, g.privs).Scan(&exists, &held)
		switch {
		case err != nil:
			c.Detail, c.Fix = fmt.Sprintf("cannot read the grants of %s: %v", g.table, err), fix
			return c
		case !exists:
			schema = append(schema, g.table)
		case !held:
			missing = append(missing, g.table+" ("+g.privs+")")
		}
	}
	if len(schema) > 0 {
		c.Detail = "the schema is not migrated: no table " + strings.Join(schema, ", ")
		c.Fix = "run hq sink --migrate-only as the schema's owner, then configs/postgres/sink-grants.sql"
		return c
	}
	if len(missing) > 0 {
		c.Detail, c.Fix = fmt.Sprintf("%s lacks %s", user, strings.Join(missing, ", ")), fix
		return c
	}
	var rewrite bool
	if err := conn.QueryRow(ctx, `SELECT has_table_privilege(current_user, 'movements', 'UPDATE,DELETE,TRUNCATE')`).Scan(&rewrite); err == nil && rewrite {
		c.OK, c.Warning = false, true
		c.Detail = user + " has every grant, and may also change or remove movements: the records are append-only only for a user with the grants file's grants"
		c.Fix = "run hq run as the grants file's rxedge_sink user, not the schema's owner"
		return c
	}
	c.OK, c.Detail = true, user+" has the sink's grants and no more on movements"
	return c
}

// natsChecks connects as one identity and checks its grants.
func natsChecks(ctx context.Context, s Settings, field string, id Identity, getenv func(string) string, timeout time.Duration) []Check {
	conn := Check{Name: field}
	pw, err := id.Password.Read(getenv)
	if err != nil {
		conn.Detail, conn.Fix = fmt.Sprintf("%s.password: %v", field, err), "make the password file readable by the service"
		return []Check{conn}
	}
	set, err := natsconn.Resolve(&natsconn.Layer{Values: natsconn.Values{Servers: s.NATS.Servers, CA: s.NATS.CA,
		User: id.User, Password: pw, Inbox: id.InboxPrefix}, From: func(string) string { return "hq settings " + field }})
	if err != nil {
		conn.Detail, conn.Fix = err.Error(), "correct nats.servers and "+field
		return []Check{conn}
	}
	nc, err := natsconn.Connect("rxedge-hq-doctor", set, timeout)
	if err != nil {
		conn.Detail = fmt.Sprintf("cannot connect as %s: %s", id.User, redact.Error(err, pw))
		conn.Fix = "check nats.servers, " + field + ".user and its password against central's configuration (hq central-config)"
		return []Check{conn}
	}
	defer nc.Close()
	conn.OK, conn.Detail = true, fmt.Sprintf("connected as %s to %s", id.User, nc.ConnectedUrlRedacted())
	out := []Check{conn}
	if field == "nats.audit" {
		out = append(out, archivesCheck(ctx, nc, id.APIPrefix, central.ArchiveStreams(s.NATS.Partitions), timeout))
	}
	return append(out, storePublishCheck(set, field, id.User, pw, timeout))
}

// archivesCheck reads each archive's state and, when it holds any, its
// first message, as the sink and verification do.
func archivesCheck(ctx context.Context, nc *nats.Conn, prefix string, names []string, timeout time.Duration) Check {
	c := Check{Name: "nats.audit reads the archives"}
	fix := "give the audit user the production configuration's grants (hq central-config) and nats.audit.js_api_prefix (rx.audit.api.)"
	js, err := jetstream.NewWithAPIPrefix(nc, prefix)
	if prefix == "" {
		js, err = jetstream.New(nc)
	}
	if err != nil {
		c.Detail, c.Fix = err.Error(), fix
		return c
	}
	var held []string
	for _, name := range names {
		qctx, cancel := context.WithTimeout(ctx, timeout)
		st, err := js.Stream(qctx, name)
		if err == nil && st.CachedInfo().State.Msgs > 0 {
			var cons jetstream.Consumer
			if cons, err = js.OrderedConsumer(qctx, name, jetstream.OrderedConsumerConfig{}); err == nil {
				_, err = cons.Next(jetstream.FetchMaxWait(timeout))
			}
		}
		cancel()
		if err != nil {
			c.Detail, c.Fix = fmt.Sprintf("cannot read %s: %v", name, err), fix
			return c
		}
		held = append(held, fmt.Sprintf("%s (%d messages)", name, st.CachedInfo().State.Msgs))
	}
	c.OK, c.Detail = true, "read "+strings.Join(held, ", ")
	return c
}

// doctorStore is the store id of the doctor's publish: no store's (a
// store id is at most 32 letters, digits, _ and -, and the roster's are
// the chain's), and the message could not be stored anyway.
const doctorStore = "RXEDGE-HQ-DOCTOR"

// storePublishCheck publishes once on a store's movement subject, on a
// connection of its own, and expects central to refuse it: a permissions
// violation, which the client records (LastError) before it reads the
// answer to the flush that follows. The message asks for a last sequence
// no stream has, so a central that let it through still stores nothing.
func storePublishCheck(set natsconn.Settings, field, user, pw string, timeout time.Duration) Check {
	c := Check{Name: field + " cannot publish on the stores' subjects"}
	// Its own error handler: the violation expected is no one's news.
	nc, err := natsconn.Connect("rxedge-hq-doctor", set, timeout, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		c.Detail, c.Fix = "cannot connect to test it: "+redact.Error(err, pw).Error(), "check the connection to central"
		return c
	}
	defer nc.Close()
	m := nats.NewMsg(central.Subject(doctorStore, strings.Repeat("0", 32)))
	m.Header.Set(jetstream.ExpectedLastSeqHeader, "18446744073709551615")
	if err := nc.PublishMsg(m); err != nil {
		c.Detail, c.Fix = "cannot publish to test it: "+err.Error(), "check the connection to central"
		return c
	}
	if err := nc.FlushTimeout(timeout); err != nil {
		c.Detail, c.Fix = "central did not answer the test: "+err.Error(), "check the connection to central"
		return c
	}
	switch {
	case errors.Is(nc.LastError(), nats.ErrPermissionViolation):
		c.OK, c.Detail = true, fmt.Sprintf("central refuses %s's publish on %s", user, central.StreamSubjects)
	default:
		c.Detail = fmt.Sprintf("central let %s publish on a store's subject (%s): it could write movements as any store", user, central.StreamSubjects)
		c.Fix = "give " + user + " the production configuration's grants (hq central-config), which allow no store subject"
	}
	return c
}
