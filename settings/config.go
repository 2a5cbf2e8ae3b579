// Package settings is the agent's configuration: the user-facing Config that
// the YAML file, RXEDGE_* environment variables and command-line flags fill
// in (flags win over the environment, the environment over the file), and
// the validated Options with every default applied. Validate reports every
// problem at once, each naming its field, and says what to do.
package settings

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/control/ingest"
	"github.com/rxedge/agent/internal/redact"
	"github.com/rxedge/agent/retry"
	"github.com/rxedge/agent/sync"
)

// Config is the user-facing configuration. Zero values mean "the default".
type Config struct {
	StoreID string `yaml:"store_id"`
	DataDir string `yaml:"data_dir"`

	Ingest struct {
		Listen           string `yaml:"listen"`
		Token            string `yaml:"token"`
		TokenFile        string `yaml:"token_file"`
		MaxRequestBytes  int64  `yaml:"max_request_bytes"`
		MaxMovementBytes int64  `yaml:"max_movement_bytes"`
		// AllowedHosts and AllowedOrigins open the ingest listener to
		// requests naming another Host, or coming from a web page.
		AllowedHosts   []string `yaml:"allowed_hosts"`
		AllowedOrigins []string `yaml:"allowed_origins"`
	} `yaml:"ingest"`

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

	Retention struct {
		SyncedKeys time.Duration `yaml:"synced_keys"`
		Journal    time.Duration `yaml:"journal"`
	} `yaml:"retention"`

	Metrics struct {
		Listen    string `yaml:"listen"`
		Token     string `yaml:"token"`
		TokenFile string `yaml:"token_file"`
	} `yaml:"metrics"`

	Control struct {
		OperatorKeys []string `yaml:"operator_keys"`
		// AllowUnsignedReads lets status and dlq.list through unsigned.
		AllowUnsignedReads bool `yaml:"allow_unsigned_reads"`
		// Operators names operators: name to NKey public key.
		Operators map[string]string `yaml:"operators"`
	} `yaml:"control"`

	Log struct {
		Level  string `yaml:"level"`
		Format string `yaml:"format"`
	} `yaml:"log"`
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

	// OperatorKeys may sign remote commands: control.operator_keys and the
	// keys of control.operators.
	OperatorKeys []string
	// OperatorNames names operator keys (key to name), for the audit
	// journal.
	OperatorNames map[string]string

	LogLevel  string
	LogFormat string // LogJSON or LogText
}

// Log formats.
const (
	LogJSON = "json"
	LogText = "text"
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

// SocketPath is the control socket in a data directory.
func SocketPath(dataDir string) string { return filepath.Join(dataDir, "agent.sock") }

var (
	nkeyPattern  = regexp.MustCompile(`^U[A-Z2-7]{55}$`)
	operatorName = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,64}$`)
)

// Validate checks the configuration and fills in defaults. It reports
// every problem at once, each naming its field.
func (c Config) Validate() (Options, error) {
	var errs []string
	bad := func(field, format string, args ...any) {
		errs = append(errs, field+": "+fmt.Sprintf(format, args...))
	}
	o := Options{StoreID: c.StoreID}

	switch {
	case c.StoreID == "":
		bad("store_id", "is required (the store's id as central knows it, e.g. S0042; flag --store-id, variable RXEDGE_STORE_ID)")
	case c.StoreID == central.FleetToken:
		bad("store_id", "\"fleet\" is reserved (it named the fleet's control subject, rx.ctl.fleet.>)")
	case !central.ValidStoreID(c.StoreID):
		bad("store_id", "must be 1 to 32 letters, digits, '-' or '_' (it is part of NATS subjects)")
	}

	if c.DataDir == "" {
		bad("data_dir", "is required (flag --data-dir, variable RXEDGE_DATA_DIR)")
	} else if abs, err := filepath.Abs(c.DataDir); err != nil {
		bad("data_dir", "%v", err)
	} else {
		o.DataDir = abs
	}

	o.IngestListen = or(c.Ingest.Listen, DefaultIngestListen)
	if o.IngestListen == "off" {
		o.IngestListen = ""
	} else if host, port, err := net.SplitHostPort(o.IngestListen); err != nil {
		bad("ingest.listen", "must be host:port, e.g. %s, or \"off\"", DefaultIngestListen)
	} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		bad("ingest.listen", "the port is not a number")
	} else if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) && c.Ingest.Token == "" && c.Ingest.TokenFile == "" {
		bad("ingest.listen", "%s is not a loopback address: also set ingest.token_file so that only the store's software can submit", o.IngestListen)
	}
	o.IngestToken = token(bad, "ingest", c.Ingest.Token, c.Ingest.TokenFile)
	o.MaxRequestBytes = positive(&errs, "ingest.max_request_bytes", c.Ingest.MaxRequestBytes, DefaultMaxRequestBytes)
	o.MaxMovementBytes = positive(&errs, "ingest.max_movement_bytes", c.Ingest.MaxMovementBytes, DefaultMaxMovementBytes)
	if o.MaxMovementBytes > o.MaxRequestBytes {
		bad("ingest.max_movement_bytes", "must not exceed ingest.max_request_bytes")
	}
	for _, h := range c.Ingest.AllowedHosts {
		if h == "" || strings.ContainsAny(h, ":/ ") {
			bad("ingest.allowed_hosts", "%q is not a host name or IPv4 address (no scheme, no port)", h)
			continue
		}
		o.AllowedHosts = append(o.AllowedHosts, h)
	}
	for _, org := range c.Ingest.AllowedOrigins {
		if u, err := url.Parse(org); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			bad("ingest.allowed_origins", "%q is not an origin such as https://pos.example", org)
			continue
		}
		o.AllowedOrigins = append(o.AllowedOrigins, strings.TrimSuffix(org, "/"))
	}

	n := c.NATS
	o.NATS = NATSOptions{User: n.User, Password: n.Password, Token: n.Token, NKeySeedFile: n.NKeySeedFile, CredsFile: n.CredsFile,
		CAFile: n.CAFile, CertFile: n.CertFile, KeyFile: n.KeyFile}
	for _, s := range n.Servers {
		u, err := url.Parse(s)
		switch {
		case err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "tls"):
			bad("nats.servers", "%q is not a server URL such as nats://central.example:4222", redact.URL(s))
		case u.User != nil:
			bad("nats.servers", "put credentials in nats.user/nats.password or nats.creds_file, not in the URL")
		default:
			o.NATS.Servers = append(o.NATS.Servers, s)
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
	o.NATS.PingInterval = positive(&errs, "nats.ping_interval", n.PingInterval, sync.DefaultPingInterval)
	// Not in the file: one second each suits every store.
	o.NATS.ReconnectWait, o.NATS.ReconnectJitter = sync.DefaultReconnectWait, sync.DefaultReconnectJitter

	s := c.Sync
	o.MaxInFlight = positive(&errs, "sync.max_in_flight", s.MaxInFlight, sync.DefaultMaxInFlight)
	o.AttemptTimeout = positive(&errs, "sync.attempt_timeout", s.AttemptTimeout, sync.DefaultAttemptTimeout)
	o.BatchSize = positive(&errs, "sync.batch_size", s.BatchSize, sync.DefaultBatchSize)
	if o.BatchSize > sync.MaxBatchSize {
		bad("sync.batch_size", "must be at most %d (the server's atomic batch limit)", sync.MaxBatchSize)
	}
	o.BatchThreshold = positive(&errs, "sync.batch_threshold", s.BatchThreshold, sync.DefaultBatchThreshold)
	o.ResumeJitter = positive(&errs, "sync.resume_jitter", s.ResumeJitter, sync.DefaultResumeJitter)
	o.SystemicAfter = positive(&errs, "sync.systemic_after", s.SystemicAfter, sync.DefaultSystemicAfter)
	o.HeartbeatInterval = positive(&errs, "sync.heartbeat_interval", s.HeartbeatInterval, sync.DefaultHeartbeatInterval)

	o.Controlled = policy(&errs, "retry.controlled", c.Retry.Controlled, retry.Controlled)
	o.Ordinary = policy(&errs, "retry.ordinary", c.Retry.Ordinary, retry.Ordinary)

	// Longer than central's dedupe horizon (central.DefaultHorizon, 35
	// days): see DESIGN §5, "Horizon and the agent's memory".
	o.SyncedHorizon = positive(&errs, "retention.synced_keys", c.Retention.SyncedKeys, 40*24*time.Hour)
	o.JournalRetention = positive(&errs, "retention.journal", c.Retention.Journal, 730*24*time.Hour)

	if c.Metrics.Listen != "" && c.Metrics.Listen != "off" {
		o.MetricsListen = c.Metrics.Listen
		if host, port, err := net.SplitHostPort(o.MetricsListen); err != nil {
			bad("metrics.listen", "must be host:port, e.g. 127.0.0.1:9717, or empty for none")
		} else if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			bad("metrics.listen", "the port is not a number")
		} else if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) && c.Metrics.Token == "" && c.Metrics.TokenFile == "" {
			bad("metrics.listen", "%s is not a loopback address: also set metrics.token_file so that only your Prometheus can scrape", o.MetricsListen)
		}
	}
	o.MetricsToken = token(bad, "metrics", c.Metrics.Token, c.Metrics.TokenFile)

	for _, k := range c.Control.OperatorKeys {
		if !nkeyPattern.MatchString(k) {
			bad("control.operator_keys", "%q is not an NKey user public key (56 characters starting with U)", k)
			continue
		}
		o.OperatorKeys = append(o.OperatorKeys, k)
	}
	o.AllowUnsignedReads = c.Control.AllowUnsignedReads
	names := make([]string, 0, len(c.Control.Operators))
	for name := range c.Control.Operators {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		k := c.Control.Operators[name]
		switch {
		case !operatorName.MatchString(name):
			bad("control.operators", "%q is not a name: letters, digits, '.', '-', '_' and '@', at most 64", name)
		case !nkeyPattern.MatchString(k):
			bad("control.operators."+name, "%q is not an NKey user public key (56 characters starting with U)", k)
		case o.OperatorNames[k] != "":
			bad("control.operators."+name, "the key is also named %q: one name per key", o.OperatorNames[k])
		default:
			if o.OperatorNames == nil {
				o.OperatorNames = map[string]string{}
			}
			o.OperatorNames[k] = name
			if !slices.Contains(o.OperatorKeys, k) {
				o.OperatorKeys = append(o.OperatorKeys, k)
			}
		}
	}

	switch o.LogLevel = or(c.Log.Level, "info"); o.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "must be debug, info, warn or error")
	}
	switch o.LogFormat = or(c.Log.Format, LogJSON); o.LogFormat {
	case LogJSON, LogText:
	default:
		bad("log.format", "must be json or text")
	}

	if len(errs) > 0 {
		return o, &Error{Problems: errs}
	}
	return o, nil
}

// token reads the bearer token of a listener from its setting or its
// file.
func token(bad func(field, format string, args ...any), section, value, file string) string {
	switch {
	case value != "" && file != "":
		bad(section+".token", "set %s.token or %s.token_file, not both", section, section)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			bad(section+".token_file", "%v", err)
			return ""
		}
		t := strings.TrimSpace(string(b))
		if len(t) < 16 {
			bad(section+".token_file", "the token in %s is shorter than 16 characters", file)
		}
		return t
	case value != "":
		if len(value) < 16 {
			bad(section+".token", "is shorter than 16 characters")
		}
		return value
	}
	return ""
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

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func positive[T int | int64 | time.Duration](errs *[]string, field string, v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		*errs = append(*errs, fmt.Sprintf("%s: must be positive (got %v)", field, v))
	}
	return v
}

func policy(errs *[]string, field string, c PolicyConfig, def retry.Policy) retry.Policy {
	p := def
	if c.MaxAttempts != 0 {
		p.MaxAttempts = c.MaxAttempts
	}
	if c.BaseDelay != 0 {
		p.BaseDelay = c.BaseDelay
	}
	if c.MaxDelay != 0 {
		p.MaxDelay = c.MaxDelay
	}
	if err := p.Validate(); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			*errs = append(*errs, field+"."+line)
		}
	}
	return p
}
