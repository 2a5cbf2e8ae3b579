// Package settings is the agent's configuration: the user-facing Config that
// the YAML file, RXEDGE_* environment variables and command-line flags fill
// in (flags win over the environment, the environment over the file), and
// the validated Options with every default applied. Validate reports every
// problem at once, each naming its field, and says what to do.
package settings

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/control/ingest"
	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/internal/logging"
	"github.com/rxedge/agent/metrics"
	"github.com/rxedge/agent/notary"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/remote"
	"github.com/rxedge/agent/retry"
	"github.com/rxedge/agent/sync"
)

// Config is the user-facing configuration. Zero values mean "the default".
type Config struct {
	StoreID string `yaml:"store_id"`
	DataDir string `yaml:"data_dir"`

	Ingest ingest.Config `yaml:"ingest"`

	NATS struct {
		Servers      []string      `yaml:"servers"`
		User         string        `yaml:"user"`
		Password     string        `yaml:"password"`
		Token        string        `yaml:"token"`
		NKeySeedFile string        `yaml:"nkey_seed_file"`
		CredsFile    string        `yaml:"creds_file"`
		CAFile       string        `yaml:"ca_file"`
		CertFile     string        `yaml:"cert_file"`
		KeyFile      string        `yaml:"key_file"`
		PingInterval time.Duration `yaml:"ping_interval"`
	} `yaml:"nats"`

	Sync struct {
		MaxInFlight       int           `yaml:"max_in_flight"`
		AttemptTimeout    time.Duration `yaml:"attempt_timeout"`
		BatchSize         int           `yaml:"batch_size"`
		BatchThreshold    int           `yaml:"batch_threshold"`
		ResumeJitter      time.Duration `yaml:"resume_jitter"`
		SystemicAfter     int           `yaml:"systemic_after"`
		HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	} `yaml:"sync"`

	Retry struct {
		Controlled PolicyConfig `yaml:"controlled"`
		Ordinary   PolicyConfig `yaml:"ordinary"`
	} `yaml:"retry"`

	Retention queue.Retention `yaml:"retention"`

	Metrics metrics.Config `yaml:"metrics"`

	// Remote says who may send this store remote commands.
	Remote remote.Config `yaml:"remote"`
	// Control is the former name of Remote, still read (with a warning).
	//
	// Deprecated: use Remote.
	Control remote.Config `yaml:"control"`

	Log logging.Config `yaml:"log"`

	// Intake is the HL7 listener, the ASAP drop folder and the formulary
	// (package intake validates it).
	Intake intake.Options `yaml:"intake"`

	// Ledger is the store's signing key and checkpoint interval (package
	// notary validates it).
	Ledger notary.Config `yaml:"ledger"`
}

// PolicyConfig is the retry policy of one class.
type PolicyConfig struct {
	MaxAttempts int           `yaml:"max_attempts"`
	BaseDelay   time.Duration `yaml:"base_delay"`
	MaxDelay    time.Duration `yaml:"max_delay"`
}

// EnvPrefix prefixes every environment variable the agent reads.
const EnvPrefix = "RXEDGE_"

// ApplyEnv sets every field for which an RXEDGE_* variable is set. The
// variable's name is the field's YAML path in upper case, joined by
// underscores: nats.servers is RXEDGE_NATS_SERVERS,
// retry.controlled.max_attempts is RXEDGE_RETRY_CONTROLLED_MAX_ATTEMPTS.
// Lists are comma-separated. lookup is os.LookupEnv in production.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	var errs []error
	walkFields(reflect.ValueOf(c).Elem(), "", func(path string, v reflect.Value) {
		name := EnvName(path)
		s, ok := lookup(name)
		if !ok {
			return
		}
		if err := setFromString(v, s); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", name, path, err))
		}
	})
	return errors.Join(errs...)
}

// EnvName is the environment variable for a YAML path such as nats.servers.
func EnvName(path string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(path, ".", "_"))
}

// Paths lists the YAML path of every setting, in file order.
func Paths() []string {
	var paths []string
	var c Config
	walkFields(reflect.ValueOf(&c).Elem(), "", func(path string, _ reflect.Value) {
		paths = append(paths, path)
	})
	return paths
}

func walkFields(v reflect.Value, prefix string, fn func(path string, v reflect.Value)) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		path := tag
		if prefix != "" {
			path = prefix + "." + tag
		}
		if f.Type.Kind() == reflect.Struct {
			walkFields(v.Field(i), path, fn)
			continue
		}
		fn(path, v.Field(i))
	}
}

func setFromString(v reflect.Value, s string) error {
	switch {
	case v.Type() == reflect.TypeOf(time.Duration(0)):
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("not a duration such as 30s or 5m")
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String:
		v.SetString(s)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return errors.New("not true or false")
		}
		v.SetBool(b)
	case v.Kind() == reflect.Int || v.Kind() == reflect.Int64:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return errors.New("not a whole number")
		}
		v.SetInt(n)
	case v.Kind() == reflect.Map && v.Type().Elem().Kind() == reflect.String:
		m := map[string]string{}
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p == "" {
				continue
			}
			k, val, ok := strings.Cut(p, "=")
			if !ok {
				return errors.New("not a list of name=value pairs")
			}
			m[strings.TrimSpace(k)] = strings.TrimSpace(val)
		}
		v.Set(reflect.ValueOf(m))
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		var list []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				list = append(list, p)
			}
		}
		v.Set(reflect.ValueOf(list))
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}

// Options is the validated configuration with every default filled in.
type Options struct {
	StoreID string
	DataDir string // absolute

	IngestListen     string // "" = no HTTP ingest listener
	IngestToken      string // "" = no token required
	MaxRequestBytes  int64
	MaxMovementBytes int64
	AllowedHosts     []string
	AllowedOrigins   []string

	NATS NATSOptions

	MaxInFlight       int
	AttemptTimeout    time.Duration
	BatchSize         int
	BatchThreshold    int
	ResumeJitter      time.Duration
	SystemicAfter     int
	HeartbeatInterval time.Duration

	Controlled retry.Policy
	Ordinary   retry.Policy

	SyncedHorizon    time.Duration
	JournalRetention time.Duration

	AllowUnsignedReads bool

	MetricsListen string // "" = no metrics listener of its own
	MetricsToken  string // "" = no token required

	// OperatorKeys may sign remote commands: remote.operator_keys and the
	// keys of remote.operators.
	OperatorKeys []string
	// OperatorNames names operator keys (key to name), for the audit
	// journal.
	OperatorNames map[string]string

	LogLevel  string
	LogFormat string // LogJSON or LogText

	// Warnings are about settings that still work but should change,
	// such as a section under its former name. The agent logs them.
	Warnings []string

	// Intake is the HL7 listener, the ASAP drop folder and the formulary.
	Intake intake.Options

	// Ledger is the signing key's file and the checkpoint interval.
	Ledger notary.Settings
}

// Log formats.
const (
	LogJSON = logging.JSON
	LogText = logging.Text
)

// NATSOptions is how the agent reaches central.
type NATSOptions = sync.NATSOptions

// Defaults.
const (
	DefaultIngestListen     = ingest.DefaultListen
	DefaultMaxRequestBytes  = ingest.DefaultMaxRequestBytes
	DefaultMaxMovementBytes = ingest.DefaultMaxMovementBytes
)

// DataFile is the bbolt file in a data directory.
func DataFile(dataDir string) string { return filepath.Join(dataDir, "agent.db") }

// Validate checks the configuration and fills in defaults. It reports
// every problem at once, each naming its field. Each section is checked
// by the package that owns it; Validate maps the sections onto their
// options and collects the problems.
func (c Config) Validate() (Options, error) {
	o := Options{StoreID: c.StoreID}
	errs := checkStoreID(c.StoreID)
	o.DataDir, errs = dataDir(c.DataDir, errs)

	in, p := c.Ingest.Validate()
	errs = append(errs, p...)
	o.IngestListen, o.IngestToken, o.AllowedHosts, o.AllowedOrigins = in.Listen, in.Token, in.AllowedHosts, in.AllowedOrigins
	o.MaxRequestBytes, o.MaxMovementBytes = in.MaxRequestBytes, in.MaxMovementBytes

	so, p := c.syncOptions().Validate()
	errs = append(errs, p...)
	o.NATS, o.MaxInFlight, o.AttemptTimeout, o.BatchSize = so.NATS, so.MaxInFlight, so.AttemptTimeout, so.BatchSize
	o.BatchThreshold, o.ResumeJitter, o.SystemicAfter, o.HeartbeatInterval = so.BatchThreshold, so.ResumeJitter, so.SystemicAfter, so.HeartbeatInterval

	o.Controlled = policy(&errs, "retry.controlled", c.Retry.Controlled, retry.Controlled)
	o.Ordinary = policy(&errs, "retry.ordinary", c.Retry.Ordinary, retry.Ordinary)

	r, p := c.Retention.Validate()
	errs = append(errs, p...)
	o.SyncedHorizon, o.JournalRetention = r.SyncedKeys, r.Journal

	o.MetricsListen, o.MetricsToken, p = c.Metrics.Validate()
	errs = append(errs, p...)

	rc, section, p := c.remote(&o)
	errs = append(errs, p...)
	o.OperatorKeys, o.OperatorNames, p = rc.Validate(section)
	errs = append(errs, p...)
	o.AllowUnsignedReads = rc.AllowUnsignedReads

	l, p := c.Log.Validate()
	errs = append(errs, p...)
	o.LogLevel, o.LogFormat = l.Level, l.Format

	o.Intake = c.Intake
	errs = append(errs, o.Intake.Validate()...)

	o.Ledger, p = c.Ledger.Validate("ledger", o.DataDir)
	errs = append(errs, p...)

	if len(errs) > 0 {
		return o, &Error{Problems: hideValues(c, errs)}
	}
	return o, nil
}

// checkStoreID returns the problem with the store id, if any.
func checkStoreID(id string) []string {
	switch {
	case id == "":
		return []string{"store_id: is required (the store's id as central knows it, e.g. S0042; flag --store-id, variable RXEDGE_STORE_ID)"}
	case id == central.FleetToken:
		return []string{"store_id: \"fleet\" is reserved (it named the fleet's control subject, rx.ctl.fleet.>)"}
	case !central.ValidStoreID(id):
		return []string{"store_id: must be 1 to 32 letters, digits, '-' or '_' (it is part of NATS subjects)"}
	}
	return nil
}

// dataDir is the data directory made absolute, with errs and its problem.
func dataDir(dir string, errs []string) (string, []string) {
	if dir == "" {
		return "", append(errs, "data_dir: is required (flag --data-dir, variable RXEDGE_DATA_DIR)")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", append(errs, "data_dir: "+err.Error())
	}
	return abs, errs
}

// RemoteSection is the remote: section, or the section under its former
// name control: when only that is given.
func (c Config) RemoteSection() remote.Config {
	if c.formerRemote() {
		return c.Control
	}
	return c.Remote
}

// formerRemote says that only the former name control: is given.
func (c Config) formerRemote() bool {
	return !reflect.ValueOf(c.Control).IsZero() && reflect.ValueOf(c.Remote).IsZero()
}

// remote is the remote: section and its name, or the section under its
// former name control: with a warning in o. Both at once is a problem.
func (c Config) remote(o *Options) (remote.Config, string, []string) {
	switch {
	case c.formerRemote():
		o.Warnings = append(o.Warnings, "control: is deprecated: rename the section remote: (variables RXEDGE_REMOTE_*)")
		return c.Control, "control", nil
	case !reflect.ValueOf(c.Control).IsZero():
		return c.Remote, "remote", []string{"control: is the former name of remote: give these settings once, under remote:"}
	}
	return c.Remote, "remote", nil
}

// syncOptions maps the nats: and sync: sections onto the sync engine's
// options.
func (c Config) syncOptions() sync.Options {
	n, s := c.NATS, c.Sync
	return sync.Options{
		NATS: NATSOptions{Servers: n.Servers, User: n.User, Password: n.Password, Token: n.Token, NKeySeedFile: n.NKeySeedFile,
			CredsFile: n.CredsFile, CAFile: n.CAFile, CertFile: n.CertFile, KeyFile: n.KeyFile, PingInterval: n.PingInterval,
			// Not in the file: one second each suits every store.
			ReconnectWait: sync.DefaultReconnectWait, ReconnectJitter: sync.DefaultReconnectJitter},
		MaxInFlight: s.MaxInFlight, AttemptTimeout: s.AttemptTimeout, BatchSize: s.BatchSize, BatchThreshold: s.BatchThreshold,
		ResumeJitter: s.ResumeJitter, SystemicAfter: s.SystemicAfter, HeartbeatInterval: s.HeartbeatInterval,
	}
}

// Sync is the options of the sync engine.
func (o *Options) Sync() sync.Options {
	return sync.Options{
		StoreID: o.StoreID, NATS: o.NATS,
		MaxInFlight: o.MaxInFlight, AttemptTimeout: o.AttemptTimeout, BatchSize: o.BatchSize,
		BatchThreshold: o.BatchThreshold, ResumeJitter: o.ResumeJitter, SystemicAfter: o.SystemicAfter,
		HeartbeatInterval: o.HeartbeatInterval, Controlled: o.Controlled, Ordinary: o.Ordinary,
	}
}

// MaxRetryDelay is the largest delay any retry policy can choose.
func (o *Options) MaxRetryDelay() time.Duration {
	return max(o.Controlled.MaxDelay, o.Ordinary.MaxDelay)
}

// Error lists every problem with a configuration.
type Error struct{ Problems []string }

func (e *Error) Error() string {
	return "invalid configuration:\n  " + strings.Join(e.Problems, "\n  ")
}

func policy(errs *[]string, field string, c PolicyConfig, def retry.Policy) retry.Policy {
	p := retry.Policy(c).Or(def)
	if err := p.Validate(); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			*errs = append(*errs, field+"."+line)
		}
	}
	return p
}

// The trial agent of `agent run --dev`.
const (
	DevStoreID = "DEV0001"
	DevBase    = "rxedge-dev" // under the working directory
	// DevHubListen is where the trial's embedded hub listens unless told
	// otherwise: loopback, the standard NATS port (hub.DefaultListen).
	DevHubListen = "127.0.0.1:4222"
)

// DevConfig is the configuration of the trial agent `agent run --dev`
// runs with its hub at hubAddr: store DevStoreID, data in
// DevBase/agent under the working directory, central the embedded hub.
// Commands given --dev use it to find that agent.
func DevConfig(hubAddr string) (Config, error) {
	base, err := filepath.Abs(DevBase)
	if err != nil {
		return Config{}, err
	}
	var c Config
	c.StoreID = DevStoreID
	c.DataDir = filepath.Join(base, "agent")
	c.NATS.Servers = []string{"nats://" + hubAddr}
	return c, nil
}
