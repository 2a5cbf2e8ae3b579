package sync

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/rxedge/agent/internal/redact"
)

// Validate checks the options as the agent's configuration gives them
// (its sync: and nats: sections) and fills in the defaults of those
// settings. It returns every problem, each naming its field as the
// configuration file does (sync.batch_size, nats.servers). A zero field
// takes its default; a negative one is a problem. The retry policies are
// package retry's to check (retry.Policy.Validate).
func (o Options) Validate() (Options, []string) {
	var p []string
	o.NATS, p = o.NATS.Validate()
	o.MaxInFlight = positive(&p, "sync.max_in_flight", o.MaxInFlight, DefaultMaxInFlight)
	o.AttemptTimeout = positive(&p, "sync.attempt_timeout", o.AttemptTimeout, DefaultAttemptTimeout)
	o.BatchSize = positive(&p, "sync.batch_size", o.BatchSize, DefaultBatchSize)
	if o.BatchSize > MaxBatchSize {
		p = append(p, fmt.Sprintf("sync.batch_size: must be at most %d (the server's atomic batch limit)", MaxBatchSize))
	}
	o.BatchThreshold = positive(&p, "sync.batch_threshold", o.BatchThreshold, DefaultBatchThreshold)
	o.ResumeJitter = positive(&p, "sync.resume_jitter", o.ResumeJitter, DefaultResumeJitter)
	o.SystemicAfter = positive(&p, "sync.systemic_after", o.SystemicAfter, DefaultSystemicAfter)
	o.HeartbeatInterval = positive(&p, "sync.heartbeat_interval", o.HeartbeatInterval, DefaultHeartbeatInterval)
	return o, p
}

// Validate checks how the agent reaches central (the nats: section of its
// configuration): server URLs without credentials, one way to
// authenticate, files that exist. It fills in the default ping interval
// and reconnect wait, and returns every problem, each naming its field. A
// server URL that is not one is left out of the options; a problem shows
// it without credentials.
func (n NATSOptions) Validate() (NATSOptions, []string) {
	var p []string
	bad := func(field, format string, args ...any) {
		p = append(p, field+": "+fmt.Sprintf(format, args...))
	}
	servers := n.Servers
	n.Servers = nil
	for i, s := range servers {
		u, err := url.Parse(s)
		switch {
		case err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "tls"):
			// A URL that does not parse may hold a password nothing can
			// tell from the rest (nats://u:PW): name its place instead.
			shown, ok := redact.Shown(s)
			if ok {
				shown = strconv.Quote(shown)
			} else {
				shown = fmt.Sprintf("server %d of %d (not shown: it may hold a password)", i+1, len(servers))
			}
			bad("nats.servers", "%s is not a server URL such as nats://central.example:4222", shown)
		case u.User != nil:
			bad("nats.servers", "put credentials in nats.user/nats.password or nats.creds_file, not in the URL")
		default:
			n.Servers = append(n.Servers, s)
		}
	}
	auth := 0
	for _, set := range []bool{n.User != "" || n.Password != "", n.Token != "", n.NKeySeedFile != "", n.CredsFile != ""} {
		if set {
			auth++
		}
	}
	if auth > 1 {
		bad("nats", "choose one way to authenticate: user and password, token, nkey_seed_file or creds_file")
	}
	if (n.User == "") != (n.Password == "") {
		bad("nats.user", "user and password go together")
	}
	files := []struct{ field, path string }{
		{"nats.nkey_seed_file", n.NKeySeedFile}, {"nats.creds_file", n.CredsFile},
		{"nats.ca_file", n.CAFile}, {"nats.cert_file", n.CertFile}, {"nats.key_file", n.KeyFile},
	}
	for _, f := range files {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			bad(f.field, "%v", err)
		}
	}
	if (n.CertFile == "") != (n.KeyFile == "") {
		bad("nats.cert_file", "a client certificate needs both cert_file and key_file")
	}
	n.PingInterval = positive(&p, "nats.ping_interval", n.PingInterval, DefaultPingInterval)
	if n.ReconnectWait == 0 {
		n.ReconnectWait = DefaultReconnectWait
	}
	return n, p
}

// positive is v, or def when v is zero; a negative v is a problem.
func positive[T int | int64 | time.Duration](p *[]string, field string, v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		*p = append(*p, fmt.Sprintf("%s: must be positive (got %v)", field, v))
	}
	return v
}
