// Package doctor tells an installer whether a store is ready: its config
// is valid, its files are private, its ingest token is set, central is
// reachable and accepts its credentials, the stream is there with the
// settings central.StreamConfig gives it, the HL7 listener accepts
// connections and the ASAP drop folder is writable on a local disk, the store may publish on its own
// subjects and not on another's, its clock agrees with central's where
// central shows its time, the disk and the queue are healthy, and the store's signing key
// is its own, private to the service's account, and the key that signed
// its newest checkpoint (else the roster needs the new key). Every failed check carries
// a one-line fix; a check that could not be run says so, and how to run
// it, and never passes. Whether central itself fsyncs every write and
// replicates its streams is head office's check (`hq durability`): it
// needs central's system account, which a store has no credential of.
//
// Its promise: Run changes nothing, locally or centrally (in an ASAP drop
// folder it creates a probe file whose name the folder never takes, and
// removes it at once). The publish
// probes carry an expected last subject sequence no subject can have, so
// the stream refuses them (error 10071) without storing anything, and the
// refusal itself proves the permission.
package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/installer"
	"github.com/rxedge/agent/internal/listen"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/sync"
)

// Check is the verdict on one aspect of the store.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"` // one line, when not OK
	// Warning: not OK, but not what keeps a store from being ready (a
	// single-server central, for one).
	Warning bool `json:"warning,omitempty"`
	// Skipped: not run, for want of access; Fix says how to run it.
	Skipped bool `json:"skipped,omitempty"`
}

// Report is every check, in order; Ready when each passed, warned or was
// skipped.
type Report struct {
	Ready  bool    `json:"ready"`
	Checks []Check `json:"checks"`
}

// Admin is an identity that may read the stream's info (the production
// template's admin), used to compare the stream's settings and read
// central's clock. A store's own identity may not.
type Admin struct {
	User, Password string
}

// Options is what Run examines.
type Options struct {
	ConfigPath string
	Config     settings.Config
	// Status reads the agent's status document (running or stopped).
	Status func(ctx context.Context) (*status.Status, error)
	Admin  *Admin
	// Timeout bounds each network step; 0 means 5 s.
	Timeout time.Duration
	// MinFree is the least free disk space that passes; 0 means 1 GiB.
	MinFree uint64
	// MaxPendingAge is the oldest pending movement that passes; 0 means 1 h.
	MaxPendingAge time.Duration
	// MaxSkew is the largest clock difference with central that passes; 0
	// means 30 s (remote commands allow that much).
	MaxSkew time.Duration
	// Command is the agent's command name, for fixes ("rxedge-agent").
	Command string
	// HQCommand is head office's command name, for fixes that central's
	// administrator runs ("rxedge-hq": provision, central-config).
	HQCommand string
	// Trial checks the trial agent of `agent run --dev`: no config file
	// and no ingest token (its listener is on loopback) are expected, so
	// those checks are skipped, not failed.
	Trial bool
}

func (o *Options) defaults() {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.MinFree == 0 {
		o.MinFree = 1 << 30
	}
	if o.MaxPendingAge <= 0 {
		o.MaxPendingAge = time.Hour
	}
	if o.MaxSkew <= 0 {
		o.MaxSkew = 30 * time.Second
	}
	if o.Command == "" {
		o.Command = "rxedge-agent"
	}
	if o.HQCommand == "" {
		o.HQCommand = "rxedge-hq"
	}
}

// Check names, in the order Run reports them.
const (
	CheckConfig     = "config"
	CheckFiles      = "files"
	CheckToken      = "ingest token"
	CheckReachable  = "central reachable"
	CheckAuth       = "authentication"
	CheckStream     = "stream"
	CheckPublishOwn = "publish own subjects"
	CheckPublishOne = "refused another store's subjects"
	CheckClock      = "clock"
	CheckDisk       = "disk space"
	CheckPending    = "oldest pending"
)

// Run performs every check and returns the report.
func Run(ctx context.Context, o Options) Report {
	o.defaults()
	var r Report
	add := func(c Check) { r.Checks = append(r.Checks, c) }

	opts, err := o.Config.Validate()
	if err != nil {
		first := strings.SplitN(err.Error(), "\n", 2)[0]
		add(Check{Name: CheckConfig, Detail: err.Error(), Fix: fmt.Sprintf("edit %s: %s", o.ConfigPath, first)})
	} else if len(opts.Warnings) > 0 {
		add(Check{Name: CheckConfig, Warning: true, Detail: o.ConfigPath + " is valid: " + strings.Join(opts.Warnings, "; "), Fix: "edit " + o.ConfigPath + ": " + opts.Warnings[0]})
	} else {
		name := o.ConfigPath
		if name == "" {
			name = "the trial's configuration"
		}
		add(Check{Name: CheckConfig, OK: true, Detail: name + " is valid"})
	}
	if o.Trial {
		add(Check{Name: CheckFiles, Skipped: true, Detail: "trial agent (run --dev): no installed files"})
		add(Check{Name: CheckToken, Skipped: true, Detail: "trial agent (run --dev): ingest on loopback without a token"})
	} else {
		add(files(o))
		add(token(o))
	}
	if err == nil {
		for _, c := range centralChecks(ctx, o, opts) {
			if o.Trial && c.Name == CheckPublishOne && !c.OK {
				// The trial's embedded hub has no accounts: a warning
				// here, a failure against a production central.
				c.Warning = true
				c.Detail += " (the trial hub has no per-store permissions; a production central must refuse this)"
			}
			add(c)
		}
		for _, c := range intakeChecks(ctx, o, opts) {
			add(c)
		}
	}
	var st *status.Status
	var stErr error
	if o.Status != nil {
		st, stErr = o.Status(ctx)
	}
	for _, c := range local(o, st, stErr) {
		add(c)
	}
	for _, c := range ledgerKeyChecks(o, st, stErr) {
		add(c)
	}
	r.Ready = true
	for _, c := range r.Checks {
		r.Ready = r.Ready && (c.OK || c.Warning || c.Skipped)
	}
	return r
}

// files checks that the config and the token are not readable by every
// local user and that the data directory exists.
func files(o Options) Check {
	c := Check{Name: CheckFiles, OK: true}
	// On Windows the DACL is read: install sets a protected one, but a
	// config copied in by hand inherits %ProgramData%'s (Users may read).
	if open := installer.ReadableByOthers(o.ConfigPath, o.Config.Ingest.TokenFile); len(open) > 0 {
		c.OK, c.Detail = false, strings.Join(open, ", ")+" readable by every local user"
		fixes := make([]string, len(open))
		for i, p := range open {
			fixes[i] = installer.PrivateFix(p)
		}
		c.Fix = strings.Join(fixes, "; ")
		return c
	}
	if fi, err := os.Stat(o.Config.DataDir); o.Config.DataDir != "" && (err != nil || !fi.IsDir()) {
		c.OK, c.Detail = false, fmt.Sprintf("data_dir %s: not a directory (%v)", o.Config.DataDir, err)
		c.Fix = fmt.Sprintf("run `%s install` (it creates %s), or fix data_dir", o.Command, o.Config.DataDir)
		return c
	}
	c.Detail = "config and token private, data directory present"
	return c
}

// token checks that the ingest listener, when on, requires a token.
func token(o Options) Check {
	in := o.Config.Ingest
	switch {
	case in.Listen == "off":
		return Check{Name: CheckToken, OK: true, Detail: "ingest listener off"}
	case in.Token == "" && in.TokenFile == "":
		return Check{Name: CheckToken, Detail: "the ingest listener takes movements without a token",
			Fix: "add `token_file: <config dir>/ingest.token` under `ingest:` and install again (it writes the token)"}
	case in.TokenFile != "":
		if _, err := listen.Token("ingest", "", in.TokenFile); err != nil {
			return Check{Name: CheckToken, Detail: fmt.Sprintf("%s: missing, unreadable or short (%v)", in.TokenFile, err),
				Fix: fmt.Sprintf("run `%s install` as an administrator: it writes a fresh token to %s", o.Command, in.TokenFile)}
		}
	}
	return Check{Name: CheckToken, OK: true, Detail: "set"}
}

// local checks the disk and the queue through the agent's status, st (or
// the error reading it).
func local(o Options, st *status.Status, err error) []Check {
	if o.Status == nil {
		return nil
	}
	if err != nil {
		fix := fmt.Sprintf("start the agent (`%s start`) and run doctor again as an administrator", o.Command)
		return []Check{
			{Name: CheckDisk, Detail: err.Error(), Fix: fix},
			{Name: CheckPending, Detail: err.Error(), Fix: fix},
		}
	}
	var out []Check
	if free := st.DataFile.FreeBytes; free < o.MinFree {
		out = append(out, Check{Name: CheckDisk, Detail: fmt.Sprintf("%d MiB free next to %s", free>>20, st.DataFile.Path),
			Fix: fmt.Sprintf("free at least %d MiB on that volume; the agent refuses movements when it is full", o.MinFree>>20)})
	} else {
		out = append(out, Check{Name: CheckDisk, OK: true, Detail: fmt.Sprintf("%d MiB free", free>>20)})
	}
	age := time.Duration(st.OldestPendingAge * float64(time.Second))
	if age > o.MaxPendingAge {
		out = append(out, Check{Name: CheckPending, Detail: fmt.Sprintf("oldest pending movement waits %s (%d pending)", age.Round(time.Second), st.Counts.Pending.Total),
			Fix: fmt.Sprintf("see `%s status` for why sync is behind (connection, pause reason)", o.Command)})
	} else {
		out = append(out, Check{Name: CheckPending, OK: true, Detail: fmt.Sprintf("%d pending, oldest %s", st.Counts.Pending.Total, age.Round(time.Second))})
	}
	return out
}

// centralChecks connect to central as the store and probe what it may do.
func centralChecks(ctx context.Context, o Options, opts settings.Options) []Check {
	servers := opts.NATS.Servers
	if len(servers) == 0 {
		fix := fmt.Sprintf("set nats.servers and the store's credentials in %s (or install with --nats and --creds)", o.ConfigPath)
		return []Check{{Name: CheckReachable, Detail: "no central servers configured", Fix: fix}}
	}
	var out []Check
	reach := reachable(ctx, servers, o.Timeout)
	out = append(out, reach)
	if !reach.OK {
		return out
	}

	perm := make(chan error, 8)
	nopts := []nats.Option{
		nats.Name("rxedge-agent-doctor/" + opts.StoreID),
		nats.CustomInboxPrefix(central.InboxPrefix(opts.StoreID)),
		nats.Timeout(o.Timeout),
		nats.NoReconnect(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case perm <- err:
			default:
			}
		}),
	}
	cred, err := opts.NATS.Credentials()
	if err != nil {
		return append(out, Check{Name: CheckAuth, Detail: err.Error(), Fix: "fix the credential file named in the config's nats section"})
	}
	nc, err := nats.Connect(strings.Join(servers, ","), append(nopts, cred...)...)
	if err != nil {
		c := Check{Name: CheckAuth, Detail: err.Error(), Fix: "check the TLS settings (nats.ca_file) and the server URLs"}
		if reason, _ := sync.Diagnose(err); reason == status.ReasonAuth {
			c.Fix = fmt.Sprintf("central refused store %s's credentials: check nats.user/password, creds_file or nkey_seed_file in %s against central's account", opts.StoreID, o.ConfigPath)
		}
		return append(out, c)
	}
	defer nc.Close()
	out = append(out, Check{Name: CheckAuth, OK: true, Detail: "accepted as store " + opts.StoreID + " by " + nc.ConnectedUrlRedacted()})

	out = append(out, stream(ctx, o, opts.StoreID, nc))
	own := central.Subject(opts.StoreID, probeKey)
	other := central.Subject(opts.StoreID+"_doctor_other", probeKey)
	out = append(out, publishOwn(ctx, o, nc, own, perm), publishOther(ctx, o, nc, other, perm))
	out = append(out, clock(ctx, o, servers, opts))
	return out
}

// probeKey names the probe subject: a valid key no movement is likely to
// have, and nothing is stored under it anyway.
const probeKey = "00000000000000000000000000000000"

// reachable dials each server's TCP port.
func reachable(ctx context.Context, servers []string, timeout time.Duration) Check {
	var failed []string
	for _, s := range servers {
		u, err := url.Parse(s)
		if err != nil {
			failed = append(failed, s)
			continue
		}
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "4222")
		}
		d := net.Dialer{Timeout: timeout}
		c, err := d.DialContext(ctx, "tcp", host)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s (%v)", host, err))
			continue
		}
		c.Close()
	}
	if len(failed) == len(servers) {
		return Check{Name: CheckReachable, Detail: "no server answers: " + strings.Join(failed, "; "),
			Fix: "check the network, DNS and firewall from this PC to central's NATS port"}
	}
	if len(failed) > 0 {
		return Check{Name: CheckReachable, OK: true, Detail: "some servers do not answer: " + strings.Join(failed, "; ")}
	}
	return Check{Name: CheckReachable, OK: true, Detail: strings.Join(servers, ", ")}
}

// stream checks that RX_MOVEMENTS answers a direct get on the store's own
// probe subject (present, direct get on) and, with admin credentials,
// that its settings are central's.
func stream(ctx context.Context, o Options, store string, nc *nats.Conn) Check {
	provision := fmt.Sprintf("as central's administrator, run `%s provision --server URL --user admin` (it creates or corrects %s)", o.HQCommand, central.StreamName)
	rctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	resp, err := nc.RequestWithContext(rctx, central.DirectGetSubject(central.Subject(store, probeKey)), nil)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return noStream(ctx, o, store, nc.ConnectedUrl())
	case err != nil:
		return Check{Name: CheckStream, Detail: "direct get: " + err.Error(),
			Fix: fmt.Sprintf("central's permissions must let store %s publish to %s", store, central.DirectGetSubject(central.Subject(store, ">")))}
	case resp.Header.Get("Status") != "" && resp.Header.Get("Status") != "404":
		return Check{Name: CheckStream, Detail: "direct get answered " + resp.Header.Get("Status") + " " + resp.Header.Get("Description"), Fix: provision}
	}
	if o.Admin == nil {
		return Check{Name: CheckStream, OK: true, Detail: central.StreamName + " present with direct get (its other settings are visible only to central's administrator: pass --admin-user to compare them)"}
	}
	info, _, err := adminInfo(ctx, o, nc.ConnectedUrl())
	if err != nil {
		return Check{Name: CheckStream, Detail: "stream info as " + o.Admin.User + ": " + err.Error(), Fix: "check --admin-user and --admin-password-file"}
	}
	if diffs := Compare(info.Config, central.StreamConfig(central.StreamOptions{})); len(diffs) > 0 {
		return Check{Name: CheckStream, Detail: "settings differ from central's: " + strings.Join(diffs, "; "), Fix: provision}
	}
	return Check{Name: CheckStream, OK: true, Detail: central.StreamName + " present with central's settings"}
}

// noStream diagnoses a direct get of the store's own subject that nobody
// answers: central has no movement stream, or it is partitioned and the
// server's configuration does not map this store's subjects onto its
// partition. It never advises a command that would put the store's
// movements outside its partition (a provision without --partitions on a
// partitioned central creates RX_MOVEMENTS beside the partitions).
func noStream(ctx context.Context, o Options, store, server string) Check {
	mapping := fmt.Sprintf("the server's configuration must map store %s's subjects (%s) onto its partition: regenerate it with %s in the roster (`%s central-config --roster FILE --partitions N`, central's own N) and reload the server", store, central.Subject(store, ">"), store, o.HQCommand)
	if o.Admin != nil {
		if n, err := partitions(ctx, o, server); err == nil && n > 0 {
			return Check{Name: CheckStream,
				Detail: fmt.Sprintf("central is partitioned (%s…%s), and nothing answers store %s's subjects: the server's configuration has no mapping of %s onto partition %d", central.MovementStream(0, n), central.MovementStream(n-1, n), store, central.Subject(store, ">"), central.Partition(store, n)),
				Fix:    strings.Replace(mapping, "--partitions N`, central's own N", fmt.Sprintf("--partitions %d`", n), 1) + fmt.Sprintf("; do not run `%s provision` without --partitions %d, which would create %s and split the store's record", o.HQCommand, n, central.StreamName)}
		} else if err == nil {
			return Check{Name: CheckStream, Detail: central.StreamName + " does not exist, or does not allow direct gets",
				Fix: fmt.Sprintf("as central's administrator, run `%s provision --server URL --user admin` (it creates or corrects %s)", o.HQCommand, central.StreamName)}
		}
	}
	return Check{Name: CheckStream,
		Detail: "nothing answers a direct get of the store's own subjects: central has no movement stream, or it is partitioned and the server's configuration lacks this store's mapping",
		Fix: fmt.Sprintf("as central's administrator, find which (pass --admin-user to let doctor tell): on a partitioned central (streams %s_<p>), %s; on a single-stream central, run `%s provision --server URL --user admin`. Never run provision without --partitions on a partitioned central: it would create %s and split the store's record",
			central.StreamName, mapping, o.HQCommand, central.StreamName)}
}

// partitions is the number of partitions central's movement streams say
// (0 for a one-partition central or none), asked as the administrator.
func partitions(ctx context.Context, o Options, server string) (int, error) {
	nc, err := nats.Connect(server, nats.UserInfo(o.Admin.User, o.Admin.Password), nats.CustomInboxPrefix(central.InboxPrefix(o.Admin.User)),
		nats.Timeout(o.Timeout), nats.NoReconnect())
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	exists := func(name string) (bool, error) {
		rctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		_, err := js.Stream(rctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return false, nil
		}
		return err == nil, err
	}
	// A partitioned central's first partition answers; its administrator
	// may ask about its partitions' streams only, so the first that does
	// not answer ends the count.
	if ok, err := exists(central.MovementStream(0, 2)); !ok {
		if one, oerr := exists(central.StreamName); one || oerr == nil {
			return 0, nil
		}
		return 0, err
	}
	n := 1
	for ; n < central.MaxPartitions; n++ {
		if ok, _ := exists(central.MovementStream(n, 2)); !ok {
			break
		}
	}
	return n, nil
}

// Compare lists the settings of got that differ from want in the ways the
// agent depends on (DESIGN §5); deployment choices (duplicate window, max
// age, replicas, limits) are not compared.
func Compare(got, want jetstream.StreamConfig) []string {
	var d []string
	diff := func(name string, g, w any) {
		if fmt.Sprint(g) != fmt.Sprint(w) {
			d = append(d, fmt.Sprintf("%s is %v, want %v", name, g, w))
		}
	}
	diff("subjects", strings.Join(got.Subjects, ","), strings.Join(want.Subjects, ","))
	diff("storage", got.Storage, want.Storage)
	diff("retention", got.Retention, want.Retention)
	diff("max_msgs_per_subject", got.MaxMsgsPerSubject, want.MaxMsgsPerSubject)
	diff("discard", got.Discard, want.Discard)
	diff("discard_new_per_subject", got.DiscardNewPerSubject, want.DiscardNewPerSubject)
	diff("deny_delete", got.DenyDelete, want.DenyDelete)
	diff("deny_purge", got.DenyPurge, want.DenyPurge)
	diff("allow_direct", got.AllowDirect, want.AllowDirect)
	diff("allow_atomic", got.AllowAtomicPublish, want.AllowAtomicPublish)
	return d
}

// adminInfo reads the stream's info as the administrator, and the local
// time halfway through the request.
func adminInfo(ctx context.Context, o Options, server string) (*jetstream.StreamInfo, time.Time, error) {
	nc, err := nats.Connect(server, nats.UserInfo(o.Admin.User, o.Admin.Password), nats.CustomInboxPrefix(central.InboxPrefix(o.Admin.User)),
		nats.Timeout(o.Timeout), nats.NoReconnect())
	if err != nil {
		return nil, time.Time{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, time.Time{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	start := time.Now()
	s, err := js.Stream(rctx, central.StreamName)
	if err != nil {
		return nil, time.Time{}, err
	}
	mid := start.Add(time.Since(start) / 2)
	return s.CachedInfo(), mid, nil
}

// probe publishes a message central must refuse to subject and waits for
// its answer: a JetStream error (the publish was allowed), a permissions
// violation, or nothing. A refused probe's reason is sync.Diagnose's
// (status.ReasonAuthorization for a permissions violation).
func probe(ctx context.Context, o Options, nc *nats.Conn, subject string, perm <-chan error) (allowed bool, reason, detail string) {
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.ExpectedStreamHeader, central.StreamName)
	// No subject holds a message at this sequence, so the stream refuses
	// the probe (10071) and stores nothing.
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(1<<62, 10))
	m.Data = []byte("{}")
	rctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	type answer struct {
		msg *nats.Msg
		err error
	}
	ans := make(chan answer, 1)
	go func() {
		r, err := nc.RequestMsgWithContext(rctx, m)
		ans <- answer{r, err}
	}()
	for {
		select {
		case err := <-perm:
			if strings.Contains(err.Error(), subject) { // the error concerns this probe
				reason, _ := sync.Diagnose(err)
				return false, reason, err.Error()
			}
		case a := <-ans:
			if a.err != nil {
				switch reason, _ := sync.Diagnose(a.err); reason {
				case status.ReasonAuthorization:
					return false, reason, a.err.Error()
				case status.ReasonNoStream:
					return false, reason, errNoStream
				default:
					return false, reason, "no answer: " + a.err.Error()
				}
			}
			var reply struct {
				Error *struct {
					ErrCode int    `json:"err_code"`
					Desc    string `json:"description"`
				} `json:"error"`
			}
			json.Unmarshal(a.msg.Data, &reply)
			if reply.Error != nil {
				return true, "", fmt.Sprintf("refused by the stream as intended (%d %s)", reply.Error.ErrCode, reply.Error.Desc)
			}
			return true, "", "stored?! " + string(a.msg.Data)
		}
	}
}

// errNoStream is a probe's detail when no stream takes the subject.
const errNoStream = "no stream takes it"

func publishOwn(ctx context.Context, o Options, nc *nats.Conn, subject string, perm <-chan error) Check {
	allowed, reason, detail := probe(ctx, o, nc, subject, perm)
	if reason == status.ReasonNoStream {
		return Check{Name: CheckPublishOwn, Detail: subject + ": " + detail, Fix: "provision the stream first (see the stream check)"}
	}
	if !allowed {
		return Check{Name: CheckPublishOwn, Detail: subject + ": " + detail,
			Fix: "central's permissions for this store must allow publish on rx.mv.<store>.> (configs/nats/production.conf.template)"}
	}
	return Check{Name: CheckPublishOwn, OK: true, Detail: subject + ": " + detail}
}

func publishOther(ctx context.Context, o Options, nc *nats.Conn, subject string, perm <-chan error) Check {
	allowed, reason, detail := probe(ctx, o, nc, subject, perm)
	if allowed {
		return Check{Name: CheckPublishOne, Detail: "this store may publish on " + subject,
			Fix: "restrict the store's publish allow list to its own subjects (configs/nats/production.conf.template)"}
	}
	if reason != status.ReasonAuthorization {
		return Check{Name: CheckPublishOne, Detail: subject + ": " + detail, Fix: "check that central answers (see the checks above)"}
	}
	return Check{Name: CheckPublishOne, OK: true, Detail: "refused: " + subject}
}

// clock compares the local clock with central's, which only the stream
// info shows (to the administrator).
func clock(ctx context.Context, o Options, servers []string, opts settings.Options) Check {
	if o.Admin == nil {
		return Check{Name: CheckClock, OK: true, Detail: "central's time is not visible to a store (pass --admin-user to compare)"}
	}
	info, mid, err := adminInfo(ctx, o, strings.Join(servers, ","))
	if err != nil || info.TimeStamp.IsZero() {
		return Check{Name: CheckClock, OK: true, Detail: "central's time is not visible"}
	}
	skew := mid.Sub(info.TimeStamp)
	if skew.Abs() > o.MaxSkew {
		return Check{Name: CheckClock, Detail: fmt.Sprintf("this PC's clock is %s off central's", skew.Round(time.Millisecond)),
			Fix: "enable time synchronisation (systemd-timesyncd, chrony or Windows Time) on this PC"}
	}
	return Check{Name: CheckClock, OK: true, Detail: fmt.Sprintf("%s off central's", skew.Round(time.Millisecond))}
}
