// Package daemon runs the agent: it opens the data file, serves the ingest
// listener and the control socket, runs the sender, and shuts all of it
// down in order. `agent run` and the system service run the same Run.
//
// Shutdown, when the context ends: the listeners refuse new submissions
// (503) and stop accepting while requests in flight finish, so every
// movement acknowledged is committed; meanwhile the sender stops, letting
// publishes in flight settle for a short grace time or abandoning them
// (they are keyed, so a later resend cannot duplicate them). The file is
// closed once both are done.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/intake/asap"
	"github.com/rxedge/agent/intake/hl7"
	"github.com/rxedge/agent/internal/version"
	"github.com/rxedge/agent/lineage"
	"github.com/rxedge/agent/metrics"
	"github.com/rxedge/agent/notary"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/remote"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/status/builder"
	"github.com/rxedge/agent/sync"
)

// ErrAlreadyRunning is returned when another agent holds the data file.
var ErrAlreadyRunning = errors.New("the agent is already running for this data directory: use `agent status`, or stop the other agent (or the service) first")

// Hooks let the caller add to a running agent.
type Hooks struct {
	// Ready is called once the agent accepts movements, with the ingest
	// listener's address ("" when it has none).
	Ready func(ingestAddr string)
	// MetricsReady is called after Ready with the metrics listener's
	// address ("" when it has none).
	MetricsReady func(metricsAddr string)
	// HL7Ready is called after Ready with the HL7 listener's address (""
	// when it has none).
	HL7Ready func(hl7Addr string)
}

// loadFormulary reads the intakes' formulary, when one is configured:
// every intake, HTTP included, checks movements against it.
func loadFormulary(path string) (intake.Formulary, error) {
	if path == "" {
		return nil, nil
	}
	fm, err := intake.LoadFormulary(path)
	if err != nil {
		return nil, fmt.Errorf("intake.formulary: %w", err)
	}
	return fm, nil
}

// bindIntakes opens the HL7 listener and prepares the ASAP drop folder,
// when configured. Both hand movements to d.sink, whose queue is set once
// the data file is open: nothing reaches it before serve starts them.
func (d *daemon) bindIntakes() error {
	in := d.opts.Intake
	d.sink = &intake.Sink{StoreID: d.opts.StoreID}
	if in.HL7.Listen != "" {
		var err error
		d.hl7Srv, err = hl7.Listen(in.HL7, &hl7.Handler{Sink: d.sink, Formulary: d.fm, Counter: &d.counters.HL7, Log: d.log}, d.log)
		if err != nil {
			return fmt.Errorf("%w%s", err, InUseHint(err, "another program (another agent?) listens there: stop it, or give the agent another address with --hl7-listen HOST:PORT (intake.hl7.listen)"))
		}
	}
	if in.ASAP.Dir != "" {
		d.watcher = &asap.Watcher{Dir: in.ASAP.Dir, Sink: d.sink, Formulary: d.fm, Counter: &d.counters.ASAP, Log: d.log,
			Poll: in.ASAP.PollInterval, MaxFileBytes: in.ASAP.MaxFileBytes}
		if err := d.watcher.Prepare(); err != nil {
			return err
		}
	}
	return nil
}

// daemon is a running agent: its parts, opened and started in order by Run.
type daemon struct {
	opts settings.Options
	log  *slog.Logger

	q        *queue.Queue
	m        *metrics.Metrics
	counters *intake.Counters
	fm       intake.Formulary
	svc      *dlq.Service
	// conn reports the connection to central; it is replaced by the
	// sender's once one is configured.
	conn func() status.Connection
	// lineageCheck reports the start-up lineage check; it is replaced by
	// the checker's once one is configured.
	lineageCheck func() *status.LineageCheck
	st           *builder.Builder
	srv          *control.Server

	sink    *intake.Sink
	hl7Srv  *hl7.Server
	watcher *asap.Watcher

	engine    *sync.Engine
	checker   *lineage.Checker
	responder *remote.Responder
	notary    *notary.Notary

	ctlLn, ingestLn, metricsLn net.Listener
	servers                    []*http.Server
	lns                        []net.Listener
	sd                         notifier
}

// Run runs the agent until ctx ends, then shuts it down cleanly. It returns
// nil after a clean shutdown.
//
// What can refuse a start for a reason outside the data directory (a
// formulary that does not load, an address in use) is checked before the
// data directory is touched, so a start that fails leaves a new data
// directory as it was: no data file, no signing key.
func Run(ctx context.Context, opts settings.Options, log *slog.Logger, hooks Hooks) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ignoreFileSizeLimit()
	d := &daemon{opts: opts, log: log, counters: new(intake.Counters)}
	served := false
	defer func() {
		if !served {
			d.closeListeners()
		}
	}()
	var err error
	if d.fm, err = loadFormulary(opts.Intake.Formulary); err != nil {
		return err
	}
	if err := d.bind(); err != nil {
		return d.runningHere(err)
	}
	if err := d.openQueue(); err != nil {
		return err
	}
	defer d.q.Close()
	d.sink.Queue = d.q

	if err := d.q.Journal(queue.Event{Action: queue.ActionStart, Actor: queue.ActorAgent, Detail: summary(opts)}); err != nil {
		return fmt.Errorf("write the start-up record to the journal: %w", err)
	}
	prune(d.q, opts, log)
	d.wire()
	d.notary.PrepareKey()
	if d.hl7Srv != nil {
		d.m.WatchHL7Refusals(hl7.RefusalReasons, d.hl7Srv.Refusals)
	}
	if len(opts.NATS.Servers) > 0 {
		d.wireSync()
		defer d.responder.Close()
	}
	if d.ctlLn, err = control.Listen(control.Endpoint(opts.DataDir)); err != nil {
		return err
	}
	served = true
	return d.serve(ctx, hooks)
}

// runningHere is err, or ErrAlreadyRunning when an agent answers on this
// data directory's control socket: a second agent started with the same
// settings finds the first one's ports taken before it reaches the data
// file's lock.
func (d *daemon) runningHere(err error) error {
	if InUseHint(err, "x") == "" {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c := control.Dial(control.Endpoint(d.opts.DataDir))
	defer c.CloseIdleConnections()
	if c.Ping(ctx) == nil {
		return ErrAlreadyRunning
	}
	return err
}

// openQueue checks for leftovers, compacts and opens the data file.
func (d *daemon) openQueue() error {
	// Never start empty over a leftover, nor beside one that may hold
	// movements: an operator decides (agent data adopt|discard).
	if err := queue.CheckLeftovers(settings.DataFile(d.opts.DataDir)); err != nil {
		d.log.Error("DATA_FILE_LEFTOVER", "error", err.Error())
		return err
	}
	// queue.Open creates the data directory, durably.
	compactAtStart(settings.DataFile(d.opts.DataDir), d.log)
	q, err := queue.Open(queue.Options{
		Path:     settings.DataFile(d.opts.DataDir),
		StoreID:  d.opts.StoreID,
		MaxAhead: d.opts.MaxRetryDelay(),
		Lineage:  true,
		MigrateProgress: func(done, total int64) {
			d.log.Info("DATA_FILE_UPGRADE", "keys_converted", done, "keys", total)
		},
	})
	if errors.Is(err, queue.ErrLocked) {
		return ErrAlreadyRunning
	}
	if err != nil {
		return err
	}
	d.q = q
	return nil
}

// wire builds the metrics, counters, dead-letter service, status builder
// and control server over the open data file.
func (d *daemon) wire() {
	opts := d.opts
	d.m = metrics.New(d.q)
	d.m.WatchIntakes(d.counters.Snapshot)
	d.svc = dlq.New(d.q)
	d.conn = func() status.Connection {
		return status.Connection{State: status.Idle, Reason: "no central servers configured: set nats.servers"}
	}
	d.lineageCheck = func() *status.LineageCheck { return nil }
	connection := func() status.Connection { return d.conn() }
	d.notary = notary.New(notary.Options{Queue: d.q, StoreID: opts.StoreID, Settings: opts.Ledger,
		AttemptTimeout: opts.AttemptTimeout, Logger: d.log})
	d.st = builder.New(builder.Sources{Queue: d.q, Connection: connection, Running: true, Intakes: d.counters.Snapshot, Ledger: d.ledgerKey,
		LineageCheck: func() *status.LineageCheck { return d.lineageCheck() }})
	d.m.WatchConnection(connection)
	d.srv = control.New(control.Options{
		Queue: d.q, StoreID: opts.StoreID,
		MaxRequestBytes: opts.MaxRequestBytes, MaxMovementBytes: opts.MaxMovementBytes,
		IngestToken: opts.IngestToken, MetricsToken: opts.MetricsToken, IngestListen: opts.IngestListen,
		AllowedHosts: opts.AllowedHosts, AllowedOrigins: opts.AllowedOrigins,
		Status: d.st, DLQ: d.svc, Metrics: d.m, Logger: d.log, Counter: &d.counters.HTTP, Formulary: d.fm,
	})
}

// ledgerKey is the notary's part of the status document.
func (d *daemon) ledgerKey() status.Ledger {
	ns := d.notary.State()
	l := status.Ledger{PublicKey: ns.PublicKey, Error: ns.Error}
	if !ns.KeyLost.IsZero() {
		at := ns.KeyLost.UTC()
		l.KeyLostAt = &at
	}
	return l
}

// wireSync builds the sender, the lineage checker and the remote-command
// responder, for an agent with central servers configured.
func (d *daemon) wireSync() {
	opts, log, q := d.opts, d.log, d.q
	checker := lineage.New(lineage.Options{Queue: q, Store: opts.StoreID, Logger: log, Timeout: opts.Sync().AttemptTimeout,
		PublicKey: func() string { return d.notary.State().PublicKey }})
	d.lineageCheck = checker.Status
	engine := sync.New(q, opts.Sync(), log, d.m, d.st.Status)
	engine.OnConnect(checker.OnConnect)
	engine.OnConnect(d.notary.OnConnect)
	d.conn = engine.Connection
	responder := remote.New(remote.Options{Queue: q, DLQ: d.svc, StoreID: opts.StoreID, OperatorKeys: opts.OperatorKeys,
		AllowUnsignedReads: opts.AllowUnsignedReads, Status: d.st.Status, Logger: log,
		PublicKey: func() string { return d.notary.State().PublicKey }})
	engine.OnConnect(responder.Subscribe)
	engine.OnHeartbeat(func(ctx context.Context, nc *nats.Conn, st *status.Status) error {
		// Until the file was checked against central, its summary
		// would overwrite the record the check reads.
		if !checker.Done() {
			return nil
		}
		return remote.PublishSummary(ctx, nc, opts.StoreID, st)
	})
	d.engine, d.checker, d.responder = engine, checker, responder
}

// bind opens the ingest, metrics and HL7 listeners and prepares the ASAP
// drop folder; on failure the caller closes what it opened
// (closeListeners).
func (d *daemon) bind() error {
	opts := d.opts
	var err error
	if opts.IngestListen != "" {
		if d.ingestLn, err = net.Listen("tcp", opts.IngestListen); err != nil {
			return fmt.Errorf("ingest.listen %s: %w%s", opts.IngestListen, err, InUseHint(err, "another program (another agent?) listens there: stop it, or give the agent another address with --ingest HOST:PORT (ingest.listen)"))
		}
	}
	if opts.MetricsListen != "" {
		if d.metricsLn, err = net.Listen("tcp", opts.MetricsListen); err != nil {
			return fmt.Errorf("metrics.listen %s: %w%s", opts.MetricsListen, err, InUseHint(err, "another program listens there: set another metrics.listen"))
		}
	}
	return d.bindIntakes()
}

// closeListeners closes the listeners of a start that failed before they
// were served, and the control socket's name.
func (d *daemon) closeListeners() {
	if d.hl7Srv != nil {
		d.hl7Srv.Close()
	}
	for _, ln := range []net.Listener{d.ingestLn, d.metricsLn} {
		if ln != nil {
			ln.Close()
		}
	}
	if d.ctlLn != nil {
		d.ctlLn.Close()
		os.Remove(control.Endpoint(d.opts.DataDir))
	}
}

// serve runs every part until ctx ends (the first error ends the rest),
// announces the agent once started, then shuts it down in order and
// closes the data file.
func (d *daemon) serve(ctx context.Context, hooks Hooks) error {
	g, gctx := errgroup.WithContext(ctx)
	hl7Addr := d.start(g, gctx)
	d.announce(hooks, hl7Addr)
	d.startWatchdog(g, gctx)
	g.Go(func() error { d.stop(gctx); return nil })
	err := g.Wait()
	os.Remove(control.Endpoint(d.opts.DataDir))
	if cerr := d.q.Close(); err == nil {
		err = cerr
	}
	d.log.Info("STOPPED", "store", d.opts.StoreID)
	return err
}

// start runs the HTTP servers, the status builder, the intakes, pruning
// and the sender in g; it returns the HL7 listener's address ("" when it
// has none).
func (d *daemon) start(g *errgroup.Group, gctx context.Context) string {
	// A request body must arrive within ReadTimeout, so a stalled client
	// cannot hold a clean stop beyond its deadline.
	d.servers = []*http.Server{{Handler: d.srv.ControlHandler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute}}
	d.lns = []net.Listener{d.ctlLn}
	if d.ingestLn != nil {
		d.servers = append(d.servers, &http.Server{Handler: d.srv.IngestHandler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second})
		d.lns = append(d.lns, d.ingestLn)
	}
	if d.metricsLn != nil {
		d.servers = append(d.servers, &http.Server{Handler: d.srv.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second})
		d.lns = append(d.lns, d.metricsLn)
	}
	for i, hs := range d.servers {
		hs, ln := hs, d.lns[i]
		g.Go(func() error {
			if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	g.Go(func() error { d.st.Run(gctx); return nil })
	hl7Addr := ""
	if d.hl7Srv != nil {
		hl7Addr = d.hl7Srv.Addr().String()
		// Serve finishes the messages in hand (stored, then acknowledged)
		// once gctx ends.
		g.Go(func() error { return d.hl7Srv.Serve(gctx) })
	}
	if d.watcher != nil {
		g.Go(func() error { return d.watcher.Run(gctx) })
	}
	g.Go(func() error { prunePeriodically(gctx, d.q, d.opts, d.log); return nil })
	g.Go(func() error { d.notary.Run(gctx); return nil })
	if d.engine != nil {
		g.Go(func() error { d.checker.Run(gctx); return nil })
		g.Go(func() error { return d.engine.Run(gctx) })
	}
	return hl7Addr
}

// announce logs STARTED, calls the hooks and tells systemd the agent is
// ready.
func (d *daemon) announce(hooks Hooks, hl7Addr string) {
	opts := d.opts
	addr := ""
	if d.ingestLn != nil {
		addr = d.ingestLn.Addr().String()
	}
	maddr := ""
	if d.metricsLn != nil {
		maddr = d.metricsLn.Addr().String()
	}
	d.log.Info("STARTED", "store", opts.StoreID, "data_dir", opts.DataDir, "ingest", addr, "metrics", maddr, "hl7", hl7Addr, "asap_dir", opts.Intake.ASAP.Dir, "version", version.Get().Version)
	if hooks.Ready != nil {
		hooks.Ready(addr)
	}
	if hooks.HL7Ready != nil {
		hooks.HL7Ready(hl7Addr)
	}
	if hooks.MetricsReady != nil {
		hooks.MetricsReady(maddr)
	}
	// Under systemd (Type=notify) the unit is "active" only from here, when
	// movements are accepted; the watchdog pings only while the control
	// socket answers a status request, which needs the data file too.
	d.sd = notifierFromEnv(os.Getenv, os.Getpid())
	if err := d.sd.send("READY=1\nSTATUS=accepting movements"); err != nil {
		d.log.Warn("NOTIFY_READY_FAILED", "error", err.Error())
	}
}

// startWatchdog runs, in g, systemd's watchdog pings while the control
// socket answers a status request.
func (d *daemon) startWatchdog(g *errgroup.Group, gctx context.Context) {
	g.Go(func() error {
		alive := control.Dial(control.Endpoint(d.opts.DataDir))
		defer alive.CloseIdleConnections()
		d.sd.runWatchdog(gctx, func(ctx context.Context) error {
			_, err := alive.Status(ctx)
			return err
		}, d.log)
		return nil
	})
}

// stop waits for gctx to end, then refuses new work, lets requests in
// flight finish (their movements are committed before they are answered)
// and stops the HTTP servers.
func (d *daemon) stop(gctx context.Context) {
	<-gctx.Done()
	d.sd.send("STOPPING=1")
	d.srv.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, hs := range d.servers {
		hs.Shutdown(sctx)
	}
}

// prune drops synced keys and journal events past their horizons, in
// bounded steps.
func prune(q *queue.Queue, opts settings.Options, log *slog.Logger) {
	total := 0
	for {
		n, err := q.Prune(opts.SyncedHorizon, opts.JournalRetention, 10000)
		if err != nil {
			log.Warn("PRUNE_FAILED", "error", err.Error())
			return
		}
		total += n
		if n < 10000 {
			break
		}
	}
	if total > 0 {
		log.Info("PRUNED", "removed", total)
	}
}

// pruneInterval is how often a running agent drops synced keys and journal
// events past their horizons.
const pruneInterval = time.Hour

// prunePeriodically prunes every pruneInterval until ctx ends, so an agent
// that runs for months keeps its horizons.
func prunePeriodically(ctx context.Context, q *queue.Queue, opts settings.Options, log *slog.Logger) {
	t := time.NewTicker(pruneInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			prune(q, opts, log)
		}
	}
}

// summary is the start-up configuration recorded in the journal (DESIGN
// P8): settings, never secrets.
func summary(o settings.Options) map[string]string {
	auth := "none"
	switch {
	case o.NATS.CredsFile != "":
		auth = "creds_file"
	case o.NATS.NKeySeedFile != "":
		auth = "nkey"
	case o.NATS.Token != "":
		auth = "token"
	case o.NATS.User != "":
		auth = "user"
	}
	return map[string]string{
		"version":          version.Get().Version,
		"data_dir":         filepath.ToSlash(o.DataDir),
		"ingest_listen":    o.IngestListen,
		"ingest_token":     fmt.Sprint(o.IngestToken != ""),
		"metrics_listen":   o.MetricsListen,
		"metrics_token":    fmt.Sprint(o.MetricsToken != ""),
		"nats_servers":     strings.Join(o.NATS.Servers, ","),
		"nats_auth":        auth,
		"nats_tls":         fmt.Sprint(o.NATS.CAFile != "" || o.NATS.CertFile != ""),
		"retry_controlled": policyString(o.Controlled.MaxAttempts, o.Controlled.BaseDelay, o.Controlled.MaxDelay),
		"retry_ordinary":   policyString(o.Ordinary.MaxAttempts, o.Ordinary.BaseDelay, o.Ordinary.MaxDelay),
		"resume_jitter":    o.ResumeJitter.String(),
		"operator_keys":    strings.Join(o.OperatorKeys, ","), // public keys: who may sign remote commands
		"unsigned_reads":   fmt.Sprint(o.AllowUnsignedReads),
		"allowed_hosts":    strings.Join(o.AllowedHosts, ","),
		"allowed_origins":  strings.Join(o.AllowedOrigins, ","),
		"operators":        operatorNames(o.OperatorNames),
		"log_format":       o.LogFormat,
		"hl7_listen":       o.Intake.HL7.Listen,
		"hl7_allowed":      strings.Join(o.Intake.HL7.AllowedHosts, ","),
		"hl7_tls":          fmt.Sprint(o.Intake.HL7.CertFile != ""),
		"asap_dir":         filepath.ToSlash(o.Intake.ASAP.Dir),
		"formulary":        filepath.ToSlash(o.Intake.Formulary),
	}
}

// operatorNames is names as name=key pairs, by name.
func operatorNames(names map[string]string) string {
	pairs := make([]string, 0, len(names))
	for key, name := range names {
		pairs = append(pairs, name+"="+key)
	}
	slices.Sort(pairs)
	return strings.Join(pairs, ",")
}

func policyString(n int, base, max time.Duration) string {
	return fmt.Sprintf("%d attempts, %s..%s", n, base, max)
}

// InUseHint is "; "+hint when err says the address is in use, else "".
func InUseHint(err error, hint string) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	if errors.Is(err, syscall.EADDRINUSE) || strings.Contains(msg, "address already in use") || strings.Contains(msg, "Only one usage of each socket address") {
		return "; " + hint
	}
	return ""
}
