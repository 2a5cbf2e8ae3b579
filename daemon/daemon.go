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

// startIntakes opens the HL7 listener and prepares the ASAP drop folder,
// when configured; both hand movements to q's group commit.
func startIntakes(opts settings.Options, q *queue.Queue, c *intake.Counters, log *slog.Logger) (*hl7.Server, *asap.Watcher, error) {
	in := opts.Intake
	var fm intake.Formulary
	if in.Formulary != "" {
		var err error
		if fm, err = intake.LoadFormulary(in.Formulary); err != nil {
			return nil, nil, fmt.Errorf("intake.formulary: %w", err)
		}
	}
	sink := &intake.Sink{Queue: q, StoreID: opts.StoreID}
	var srv *hl7.Server
	if in.HL7.Listen != "" {
		var err error
		srv, err = hl7.Listen(in.HL7, &hl7.Handler{Sink: sink, Formulary: fm, Counter: &c.HL7, Log: log}, log)
		if err != nil {
			return nil, nil, err
		}
	}
	var w *asap.Watcher
	if in.ASAP.Dir != "" {
		w = &asap.Watcher{Dir: in.ASAP.Dir, Sink: sink, Formulary: fm, Counter: &c.ASAP, Log: log,
			Poll: in.ASAP.PollInterval, MaxFileBytes: in.ASAP.MaxFileBytes}
		if err := w.Prepare(); err != nil {
			if srv != nil {
				srv.Close()
			}
			return nil, nil, err
		}
	}
	return srv, w, nil
}

// Run runs the agent until ctx ends, then shuts it down cleanly. It returns
// nil after a clean shutdown.
func Run(ctx context.Context, opts settings.Options, log *slog.Logger, hooks Hooks) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ignoreFileSizeLimit()
	// Never start empty over a leftover, nor beside one that may hold
	// movements: an operator decides (agent data adopt|discard).
	if err := queue.CheckLeftovers(settings.DataFile(opts.DataDir)); err != nil {
		log.Error("DATA_FILE_LEFTOVER", "error", err.Error())
		return err
	}
	// queue.Open creates the data directory, durably.
	compactAtStart(settings.DataFile(opts.DataDir), log)
	q, err := queue.Open(queue.Options{
		Path:     settings.DataFile(opts.DataDir),
		StoreID:  opts.StoreID,
		MaxAhead: opts.MaxRetryDelay(),
		Lineage:  true,
	})
	if errors.Is(err, queue.ErrLocked) {
		return ErrAlreadyRunning
	}
	if err != nil {
		return err
	}
	defer q.Close()

	if err := q.Journal(queue.Event{Action: queue.ActionStart, Actor: queue.ActorAgent, Detail: summary(opts)}); err != nil {
		return fmt.Errorf("write the start-up record to the journal: %w", err)
	}
	prune(q, opts, log)

	m := metrics.New(q)
	counters := new(intake.Counters)
	m.WatchIntakes(counters.Snapshot)
	svc := dlq.New(q)
	var conn func() status.Connection = func() status.Connection {
		return status.Connection{State: status.Idle, Reason: "no central servers configured: set nats.servers"}
	}
	connection := func() status.Connection { return conn() }
	st := builder.New(builder.Sources{Queue: q, Connection: connection, Running: true, Intakes: counters.Snapshot})
	m.WatchConnection(connection)
	srv := control.New(control.Options{
		Queue: q, StoreID: opts.StoreID,
		MaxRequestBytes: opts.MaxRequestBytes, MaxMovementBytes: opts.MaxMovementBytes,
		IngestToken: opts.IngestToken, MetricsToken: opts.MetricsToken, IngestListen: opts.IngestListen,
		AllowedHosts: opts.AllowedHosts, AllowedOrigins: opts.AllowedOrigins,
		Status: st, DLQ: svc, Metrics: m, Logger: log, Counter: &counters.HTTP,
	})
	hl7Srv, watcher, err := startIntakes(opts, q, counters, log)
	if err != nil {
		return err
	}

	var engine *sync.Engine
	var checker *lineage.Checker
	if len(opts.NATS.Servers) > 0 {
		checker = lineage.New(q, opts.StoreID, log, opts.Sync().AttemptTimeout)
		engine = sync.New(q, opts.Sync(), log, m, st.Status)
		engine.OnConnect(checker.OnConnect)
		conn = engine.Connection
		responder := remote.New(remote.Options{Queue: q, DLQ: svc, StoreID: opts.StoreID, OperatorKeys: opts.OperatorKeys,
			AllowUnsignedReads: opts.AllowUnsignedReads, Status: st.Status, Logger: log})
		defer responder.Close()
		engine.OnConnect(responder.Subscribe)
		engine.OnHeartbeat(func(ctx context.Context, nc *nats.Conn, st *status.Status) error {
			// Until the file was checked against central, its summary
			// would overwrite the record the check reads.
			if !checker.Done() {
				return nil
			}
			return remote.PublishSummary(ctx, nc, opts.StoreID, st)
		})
	}

	ctlLn, err := control.Listen(control.Endpoint(opts.DataDir))
	if err != nil {
		if hl7Srv != nil {
			hl7Srv.Close()
		}
		return err
	}
	var ingestLn, metricsLn net.Listener
	if opts.IngestListen != "" {
		if ingestLn, err = net.Listen("tcp", opts.IngestListen); err != nil {
			if hl7Srv != nil {
				hl7Srv.Close()
			}
			ctlLn.Close()
			os.Remove(control.Endpoint(opts.DataDir))
			return fmt.Errorf("ingest.listen %s: %w%s", opts.IngestListen, err, InUseHint(err, "another program (another agent?) listens there: stop it, or give the agent another address with --ingest HOST:PORT (ingest.listen)"))
		}
	}
	if opts.MetricsListen != "" {
		if metricsLn, err = net.Listen("tcp", opts.MetricsListen); err != nil {
			if hl7Srv != nil {
				hl7Srv.Close()
			}
			ctlLn.Close()
			if ingestLn != nil {
				ingestLn.Close()
			}
			os.Remove(control.Endpoint(opts.DataDir))
			return fmt.Errorf("metrics.listen %s: %w%s", opts.MetricsListen, err, InUseHint(err, "another program listens there: set another metrics.listen"))
		}
	}

	// Everything below runs until ctx ends; the first error ends the rest.
	g, gctx := errgroup.WithContext(ctx)
	// A request body must arrive within ReadTimeout, so a stalled client
	// cannot hold a clean stop beyond its deadline.
	servers := []*http.Server{{Handler: srv.ControlHandler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute}}
	lns := []net.Listener{ctlLn}
	if ingestLn != nil {
		servers = append(servers, &http.Server{Handler: srv.IngestHandler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second})
		lns = append(lns, ingestLn)
	}
	if metricsLn != nil {
		servers = append(servers, &http.Server{Handler: srv.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second})
		lns = append(lns, metricsLn)
	}
	for i, hs := range servers {
		hs, ln := hs, lns[i]
		g.Go(func() error {
			if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	g.Go(func() error { st.Run(gctx); return nil })
	hl7Addr := ""
	if hl7Srv != nil {
		hl7Addr = hl7Srv.Addr().String()
		// Serve finishes the messages in hand (stored, then acknowledged)
		// once gctx ends.
		g.Go(func() error { return hl7Srv.Serve(gctx) })
	}
	if watcher != nil {
		g.Go(func() error { return watcher.Run(gctx) })
	}
	g.Go(func() error { prunePeriodically(gctx, q, opts, log); return nil })
	if engine != nil {
		g.Go(func() error { checker.Run(gctx); return nil })
		g.Go(func() error { return engine.Run(gctx) })
	}

	addr := ""
	if ingestLn != nil {
		addr = ingestLn.Addr().String()
	}
	maddr := ""
	if metricsLn != nil {
		maddr = metricsLn.Addr().String()
	}
	log.Info("STARTED", "store", opts.StoreID, "data_dir", opts.DataDir, "ingest", addr, "metrics", maddr, "hl7", hl7Addr, "asap_dir", opts.Intake.ASAP.Dir, "version", version.Get().Version)
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
	sd := notifierFromEnv(os.Getenv, os.Getpid())
	if err := sd.send("READY=1\nSTATUS=accepting movements"); err != nil {
		log.Warn("NOTIFY_READY_FAILED", "error", err.Error())
	}
	g.Go(func() error {
		alive := control.Dial(control.Endpoint(opts.DataDir))
		defer alive.CloseIdleConnections()
		sd.runWatchdog(gctx, func(ctx context.Context) error {
			_, err := alive.Status(ctx)
			return err
		}, log)
		return nil
	})

	g.Go(func() error {
		<-gctx.Done()
		sd.send("STOPPING=1")
		// Refuse new work, let requests in flight finish (their movements
		// are committed before they are answered), then stop.
		srv.Drain()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, hs := range servers {
			hs.Shutdown(sctx)
		}
		return nil
	})
	err = g.Wait()
	os.Remove(control.Endpoint(opts.DataDir))
	if cerr := q.Close(); err == nil {
		err = cerr
	}
	log.Info("STOPPED", "store", opts.StoreID)
	return err
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
