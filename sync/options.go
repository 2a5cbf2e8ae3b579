package sync

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/internal/version"
	"github.com/rxedge/agent/retry"
)

// Defaults of Options. A zero field takes its default; the settings
// package maps the agent's configuration file onto Options and validates
// it, and writes no default of its own.
const (
	DefaultMaxInFlight       = 256
	DefaultAttemptTimeout    = 5 * time.Second
	DefaultBatchSize         = MaxBatchSize
	DefaultBatchThreshold    = 64
	DefaultResumeJitter      = 30 * time.Second
	DefaultSystemicAfter     = 8
	DefaultHeartbeatInterval = 30 * time.Second
	DefaultPingInterval      = 10 * time.Second
	DefaultReconnectWait     = time.Second
	DefaultReconnectJitter   = time.Second
	// DefaultInProcessRetries is how many times in a row a movement is
	// retried soon and uncharged while central says its id or subject is
	// still in process; the next such answer is charged as an attempt.
	DefaultInProcessRetries = 3

	// MaxBatchSize is the server's limit on the messages of an atomic batch.
	MaxBatchSize = 1000
)

// Options tune the engine. The zero value of every field means its default
// (see the Default… constants and the retry package's policies).
type Options struct {
	StoreID string
	NATS    NATSOptions

	MaxInFlight       int           // single publishes awaiting their ack
	AttemptTimeout    time.Duration // per publish
	BatchSize         int           // movements per atomic batch (≤ MaxBatchSize)
	BatchThreshold    int           // due movements above which batches are used
	NoBatch           bool          // never use atomic batches
	ResumeJitter      time.Duration // random wait after a reconnect
	SystemicAfter     int           // consecutive failures on different movements that mean "central"
	InProcessRetries  int           // uncharged "in process" retries in a row before one is charged
	HeartbeatInterval time.Duration

	Controlled retry.Policy
	Ordinary   retry.Policy
	Probe      retry.Policy // pacing of probes while paused

	AgentVersion string // recorded with each quarantined movement
	// Rand returns numbers in [0, 1). Default math/rand/v2.
	Rand func() float64
}

// NATSOptions is how the agent reaches central.
type NATSOptions struct {
	Servers      []string
	User         string
	Password     string
	Token        string
	NKeySeedFile string
	CredsFile    string
	CAFile       string
	CertFile     string
	KeyFile      string
	PingInterval time.Duration
	// ReconnectWait and ReconnectJitter pace nats.go's reconnect attempts
	// (each attempt waits ReconnectWait plus up to ReconnectJitter). A
	// zero ReconnectJitter means none: benchmarks that measure a fleet
	// without any jitter use it.
	ReconnectWait   time.Duration
	ReconnectJitter time.Duration
}

// withDefaults returns o with every zero field set to its default.
func (o Options) withDefaults() Options {
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = DefaultAttemptTimeout
	}
	if o.BatchSize <= 0 || o.BatchSize > MaxBatchSize {
		o.BatchSize = DefaultBatchSize
	}
	if o.BatchThreshold <= 0 {
		o.BatchThreshold = DefaultBatchThreshold
	}
	if o.ResumeJitter <= 0 {
		o.ResumeJitter = DefaultResumeJitter
	}
	if o.SystemicAfter <= 0 {
		o.SystemicAfter = DefaultSystemicAfter
	}
	if o.InProcessRetries <= 0 {
		o.InProcessRetries = DefaultInProcessRetries
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.NATS.PingInterval <= 0 {
		o.NATS.PingInterval = DefaultPingInterval
	}
	if o.NATS.ReconnectWait <= 0 {
		o.NATS.ReconnectWait = DefaultReconnectWait
	}
	if o.Controlled.MaxAttempts == 0 {
		o.Controlled = retry.Controlled
	}
	if o.Ordinary.MaxAttempts == 0 {
		o.Ordinary = retry.Ordinary
	}
	if o.Probe.MaxDelay == 0 {
		o.Probe = retry.Probe
	}
	if o.AgentVersion == "" {
		o.AgentVersion = version.Get().Version
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	return o
}

// Credentials are the nats.go options of n's credentials and TLS: the
// first of user and password, token, NKey seed file or .creds file that
// is set, and the CA and client certificate.
func (n NATSOptions) Credentials() ([]nats.Option, error) {
	var opts []nats.Option
	switch {
	case n.User != "":
		opts = append(opts, nats.UserInfo(n.User, n.Password))
	case n.Token != "":
		opts = append(opts, nats.Token(n.Token))
	case n.NKeySeedFile != "":
		opt, err := nats.NkeyOptionFromSeed(n.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nats.nkey_seed_file: %w", err)
		}
		opts = append(opts, opt)
	case n.CredsFile != "":
		opts = append(opts, nats.UserCredentials(n.CredsFile))
	}
	if n.CAFile != "" {
		opts = append(opts, nats.RootCAs(n.CAFile))
	}
	if n.CertFile != "" {
		opts = append(opts, nats.ClientCert(n.CertFile, n.KeyFile))
	}
	return opts, nil
}
