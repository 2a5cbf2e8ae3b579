package doctor

import "context"

// durable checks that central fsyncs every write and replicates the
// movement streams and archives: visible only to central's system account
// or on its monitoring endpoints, so without Options.Durability it is
// skipped, never passed.
func durable(ctx context.Context, o Options, servers []string, caFile string) Check {
	if o.Durability == nil {
		return Check{Name: CheckDurability, Skipped: true,
			Detail: "not run: central's fsync setting and replicas are visible only to its system account or on its monitoring endpoints",
			Fix:    "pass --system-user sys --system-password-file FILE, or --monitor-url http://<server>:8222 (one per server)"}
	}
	c := o.Durability(ctx, servers, caFile)
	c.Name = CheckDurability
	return c
}
