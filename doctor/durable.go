package doctor

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/headoffice/durability"
)

// durable checks that central fsyncs every write and replicates the
// movement streams and archives: visible only to central's system account
// or on its monitoring endpoints, so without either it is skipped, never
// passed.
func durable(ctx context.Context, o Options, servers []string, caFile string) Check {
	d := o.Durability
	if d == nil || d.SystemUser == "" && len(d.MonitorURLs) == 0 {
		return Check{Name: CheckDurability, Skipped: true,
			Detail: "not run: central's fsync setting and replicas are visible only to its system account or on its monitoring endpoints",
			Fix:    "pass --system-user sys --system-password-file FILE, or --monitor-url http://<server>:8222 (one per server)"}
	}
	var (
		r   durability.Report
		err error
	)
	if d.SystemUser != "" {
		var nc *nats.Conn
		nopts := []nats.Option{nats.UserInfo(d.SystemUser, d.SystemPassword),
			nats.CustomInboxPrefix("_INBOX_" + d.SystemUser), nats.Timeout(o.Timeout), nats.NoReconnect()}
		if caFile != "" {
			nopts = append(nopts, nats.RootCAs(caFile))
		}
		nc, err = nats.Connect(strings.Join(servers, ","), nopts...)
		if err == nil {
			defer nc.Close()
			r, err = durability.FromSystem(ctx, nc, o.Timeout)
		}
	} else {
		r, err = durability.FromMonitor(ctx, nil, d.MonitorURLs, o.Timeout)
	}
	if err != nil {
		return Check{Name: CheckDurability, Detail: "not checked: " + err.Error(),
			Fix: "check --system-user and --system-password-file (a user of central's system account), or --monitor-url"}
	}
	return durabilityCheck(r)
}

// durabilityCheck sums a durability report up as one check: the worst
// findings in the detail, the first one's fix.
func durabilityCheck(r durability.Report) Check {
	worst := r.Worst()
	if worst == durability.OK {
		return Check{Name: CheckDurability, OK: true,
			Detail: fmt.Sprintf("%d server(s) fsync every write; %d movement stream(s) and archive(s) replicated on a cluster of %d", len(r.Servers), len(r.Streams), r.ClusterSize)}
	}
	c := Check{Name: CheckDurability, Warning: worst == durability.Warning}
	var details []string
	for _, f := range r.Findings {
		if f.Severity != worst {
			continue
		}
		what := f.Server
		if f.Stream != "" {
			what = f.Stream
		}
		if what != "" {
			what += ": "
		}
		details = append(details, what+f.Detail)
		if c.Fix == "" {
			c.Fix = f.Fix
		}
	}
	c.Detail = strings.Join(details, "; ")
	return c
}
