package service

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/headoffice/console"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/headoffice/natsconn"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/headoffice/sink"
)

// Service is hq run: the jobs its settings enable, under one supervisor,
// and the listener of /metrics, /readyz and /healthz.
type Service struct {
	Settings Settings
	Env      *Env
	Sup      *Supervisor
	Book     *fleet.ProblemBook
	Index    *fleet.Index
	Console  *console.Server
	// DevAuth serves the console in the development mode (hq run --dev).
	DevAuth bool
	// Gatherers are the jobs' own metrics served with the supervisor's.
	gatherers []prometheus.Gatherer
	closers   []func()
	consoleLn net.Listener
}

// Open makes the service of s (checked: Settings.Check): it reads the
// roster and the keys, and makes the database pool and the NATS
// connections, which reconnect by themselves; a central or a database
// that does not answer yet is not an error here: the jobs report it and
// retry. Close releases what Open made.
func Open(s Settings, getenv func(string) string, log *slog.Logger, dev bool) (_ *Service, err error) {
	svc := &Service{Settings: s, Book: fleet.NewProblemBook(), DevAuth: dev}
	defer func() {
		if err != nil {
			svc.Close()
		}
	}()
	e := &Env{Logger: log, Archives: central.ArchiveStreams(s.NATS.Partitions),
		AuditPrefix: s.NATS.Audit.APIPrefix, WitnessPrefix: s.NATS.Witness.APIPrefix}
	svc.Env = e
	if err := svc.openPostgres(getenv); err != nil {
		return nil, err
	}
	if err := svc.openNATS(getenv); err != nil {
		return nil, err
	}
	if s.Roster != "" {
		if e.Roster, err = provision.ParseRosterFile(s.Roster); err != nil {
			return nil, fmt.Errorf("roster: %w", err)
		}
	}
	var signer *command.Signer
	if p := s.NATS.OperatorKey.Path(getenv); p != "" {
		if signer, err = command.LoadSigner(p); err != nil {
			return nil, fmt.Errorf("nats.operator_key: %w", err)
		}
		e.Asker = fleet.NewClient(e.Audit, signer)
	}
	if s.Witness.PublicKey != "" {
		if e.WitnessKey, err = note.NewVerifier(strings.TrimSpace(s.Witness.PublicKey)); err != nil {
			return nil, errors.New("witness.public_key: not a note verifier key (hq witness-key prints it)")
		}
	}
	sup := New(Options{Logger: log, StopTimeout: s.StopTimeout, Leaser: svc.leaser()})
	e.Registry = sup.Registry()
	jobs, err := svc.jobs(getenv, signer)
	if err != nil {
		return nil, err
	}
	svc.Sup = New(Options{Jobs: jobs, Logger: log, StopTimeout: s.StopTimeout, Leaser: svc.leaser()})
	// The jobs' metrics are on the first supervisor's registry: serve it.
	svc.gatherers = append(svc.gatherers, sup.Registry())
	return svc, nil
}

func (svc *Service) leaser() *Leaser {
	if svc.Env.Postgres == nil {
		return nil
	}
	return &Leaser{Config: svc.Env.Postgres.ConnConfig}
}

// openPostgres makes the pool (it connects when first used).
func (svc *Service) openPostgres(getenv func(string) string) error {
	s := svc.Settings
	if s.Postgres.URL == "" {
		return nil
	}
	var set sink.Settings
	set.Postgres.URL, set.Postgres.PasswordFile = s.Postgres.URL, s.Postgres.Password.Path(getenv)
	cfg, err := set.PostgresConfig()
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "rxedge-hq"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	svc.Env.Postgres, svc.Env.Pool = cfg, pool
	svc.closers = append(svc.closers, pool.Close)
	return nil
}

// openNATS connects the three identities; each reconnects for as long as
// the service runs.
func (svc *Service) openNATS(getenv func(string) string) error {
	s := svc.Settings
	conn := func(name string, id Identity, field string) (*nats.Conn, error) {
		pw, err := id.Password.Read(getenv)
		if err != nil {
			return nil, fmt.Errorf("%s.password: %w", field, err)
		}
		from := func(string) string { return "hq settings " + field }
		set, err := natsconn.Resolve(&natsconn.Layer{Values: natsconn.Values{Servers: s.NATS.Servers, CA: s.NATS.CA,
			User: id.User, Password: pw, Inbox: id.InboxPrefix}, From: from})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		nc, err := natsconn.Connect(name, set, 5*time.Second, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
		if err != nil {
			return nil, err
		}
		svc.closers = append(svc.closers, nc.Close)
		return nc, nil
	}
	var err error
	e := svc.Env
	if e.Audit, err = conn("rxedge-hq-audit", s.NATS.Audit, "nats.audit"); err != nil {
		return err
	}
	if On(s.Witness.Enabled) {
		if e.Witness, err = conn("rxedge-hq-witness", s.NATS.Witness, "nats.witness"); err != nil {
			return err
		}
	}
	if On(s.Fleet.Enabled) || s.Console != nil {
		if e.Ops, err = conn("rxedge-hq-ops", s.NATS.Ops, "nats.ops"); err != nil {
			return err
		}
	}
	return nil
}

// jobs are the jobs the settings enable.
func (svc *Service) jobs(getenv func(string) string, signer *command.Signer) ([]Job, error) {
	s, e := svc.Settings, svc.Env
	var jobs []Job
	if On(s.Sink.Enabled) {
		m := sink.NewMetrics()
		svc.gatherers = append(svc.gatherers, m.Gatherer())
		jobs = append(jobs, SinkJob(e, m, s.Sink.Batch, s.Sink.FlushInterval))
	}
	if On(s.Witness.Enabled) {
		key, err := s.Witness.SigningKey.Read(getenv)
		if err != nil {
			return nil, fmt.Errorf("witness.signing_key: %w", err)
		}
		signer, err := note.NewSigner(key)
		if err != nil {
			return nil, errors.New("witness.signing_key: not a note signer key (hq witness-key makes one)")
		}
		g := &swapGatherer{}
		svc.gatherers = append(svc.gatherers, g)
		jobs = append(jobs, WitnessJob(e, signer, s.Witness.StateFile, s.Witness.Interval, g))
	}
	if On(s.Verify.Enabled) {
		jobs = append(jobs, VerifyJob(e, s.Verify.Interval, s.Verify.RecheckBudget))
	}
	if On(s.Reconcile.Enabled) {
		jobs = append(jobs, ReconcileJob(e, s.Reconcile.Interval, s.Reconcile.Grace))
	}
	if On(s.Fleet.Enabled) || s.Console != nil {
		svc.Index = fleet.NewIndex(fleet.IndexOptions{Roster: rosterStores(e.Roster), Limits: svc.limits(),
			WitnessKey: strings.TrimSpace(s.Witness.PublicKey), WitnessJS: svc.auditJS(), Logger: e.Logger.With("job", JobFleet)})
		w := NewFleetWatch(svc.Index, svc.Book, s.Fleet.Interval, e.Registry)
		js, err := jetstream.New(e.Ops)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, w.Job(js, e.Logger.With("job", JobFleet)))
	}
	if s.Console != nil {
		j, err := svc.console(signer)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

func (svc *Service) auditJS() jetstream.JetStream {
	var js jetstream.JetStream
	var err error
	if p := svc.Env.AuditPrefix; p != "" {
		js, err = jetstream.NewWithAPIPrefix(svc.Env.Audit, p)
	} else {
		js, err = jetstream.New(svc.Env.Audit)
	}
	if err != nil {
		return nil
	}
	return js
}

func (svc *Service) limits() fleet.Limits {
	f := svc.Settings.Fleet
	l := fleet.Limits{Stale: DefaultStale, Silent: DefaultSilent, MaxAge: DefaultMaxAge}
	if f.Stale > 0 {
		l.Stale = f.Stale
	}
	if f.Silent > 0 {
		l.Silent = f.Silent
	}
	if f.MaxAge > 0 {
		l.MaxAge = f.MaxAge
	}
	return l
}

// The fleet watch's default thresholds: hq remote status --fleet's.
const (
	DefaultStale  = 2 * time.Minute
	DefaultSilent = 15 * time.Minute
	DefaultMaxAge = time.Hour
)

// rosterStores are the roster's stores with their places.
func rosterStores(r *provision.Roster) []fleet.RosterStore {
	if r == nil {
		return nil
	}
	out := make([]fleet.RosterStore, 0, len(r.Stores))
	for _, id := range r.Stores {
		p := r.Place(id)
		out = append(out, fleet.RosterStore{Store: id, Region: p.Region, Tags: p.Tags})
	}
	return out
}

// Run serves /metrics, /readyz and /healthz on the settings' listen
// address and runs the jobs until ctx ends (Supervisor.Run).
func (svc *Service) Run(ctx context.Context, ready func(addr string)) error {
	ln, err := net.Listen("tcp", svc.Settings.Listen)
	if err != nil {
		return fmt.Errorf("listen %s (/metrics, /readyz): %w", svc.Settings.Listen, err)
	}
	h := svc.Sup.Handler(svc.gatherers...)
	if svc.Settings.ListenToken != (Secret{}) {
		tok, err := svc.Settings.ListenToken.Read(os.Getenv)
		if err != nil {
			return fmt.Errorf("listen_token: %w", err)
		}
		h = bearerOnly(tok, h)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	if ready != nil {
		ready(ln.Addr().String())
	}
	return svc.Sup.Run(ctx)
}

// Close closes the connections and the pool.
func (svc *Service) Close() {
	for i := len(svc.closers) - 1; i >= 0; i-- {
		svc.closers[i]()
	}
	svc.closers = nil
}

// bearerOnly asks every request but /healthz for the token (Authorization:
// Bearer), compared in constant time.
func bearerOnly(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if r.URL.Path != "/healthz" && subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="rxedge-hq"`)
			http.Error(w, "missing or wrong token: send Authorization: Bearer <the listen_token>", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
