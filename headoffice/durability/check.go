package durability

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Access is how to see central's fsync setting and replicas (either
// field): a user of central's system account, or its servers' monitoring
// URLs.
type Access struct {
	SystemUser, SystemPassword string
	MonitorURLs                []string
}

// Summary is a durability report summed up as one check, as a store's
// doctor shows it: the worst findings in the detail, the first one's fix.
type Summary struct {
	OK, Warning bool
	Detail, Fix string
}

// Check reads the report through a (servers and caFile are central's
// client URLs and CA, for the system user) and sums it up. A report that
// cannot be read is a failed check saying why.
func Check(ctx context.Context, a Access, servers []string, caFile string, timeout time.Duration) Summary {
	var (
		r   Report
		err error
	)
	if a.SystemUser != "" {
		var nc *nats.Conn
		nopts := []nats.Option{nats.UserInfo(a.SystemUser, a.SystemPassword),
			nats.CustomInboxPrefix("_INBOX_" + a.SystemUser), nats.Timeout(timeout), nats.NoReconnect()}
		if caFile != "" {
			nopts = append(nopts, nats.RootCAs(caFile))
		}
		nc, err = nats.Connect(strings.Join(servers, ","), nopts...)
		if err == nil {
			defer nc.Close()
			r, err = FromSystem(ctx, nc, timeout)
		}
	} else {
		r, err = FromMonitor(ctx, nil, a.MonitorURLs, timeout)
	}
	if err != nil {
		return Summary{Detail: "not checked: " + err.Error(),
			Fix: "check --system-user and --system-password-file (a user of central's system account), or --monitor-url"}
	}
	return Summarize(r)
}

// Summarize sums a report up: OK only without findings to fix, Warning
// when the worst are warnings.
func Summarize(r Report) Summary {
	worst := r.Worst()
	if worst == OK {
		return Summary{OK: true,
			Detail: fmt.Sprintf("%d server(s) fsync every write; %d movement stream(s) and archive(s) replicated on a cluster of %d", len(r.Servers), len(r.Streams), r.ClusterSize)}
	}
	s := Summary{Warning: worst == Warning}
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
		if s.Fix == "" {
			s.Fix = f.Fix
		}
	}
	s.Detail = strings.Join(details, "; ")
	return s
}
