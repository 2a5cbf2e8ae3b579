package service

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rxedge/agent/headoffice/console"
	"github.com/rxedge/agent/headoffice/sink"
	"github.com/rxedge/agent/internal/disk"
	"github.com/rxedge/agent/internal/listen"
	"github.com/rxedge/agent/internal/secret"
)

// Defaults of the settings file.
const (
	DefaultListen            = "127.0.0.1:9467"
	DefaultVerifyInterval    = 5 * time.Minute
	DefaultReconcileInterval = time.Hour
	DefaultWitnessInterval   = 30 * time.Second
	DefaultConnectTimeout    = time.Minute
	// CredentialsEnv is where systemd's LoadCredential puts the files a
	// *_credential setting names.
	CredentialsEnv = "CREDENTIALS_DIRECTORY"
)

// Secret names where a password or key is: a file, or a credential
// systemd hands the service (LoadCredential=NAME:PATH). It is never in
// the settings file itself.
type Secret struct {
	File       string `yaml:"file"`
	Credential string `yaml:"credential"`
}

// Identity is a NATS identity of the service.
type Identity struct {
	User        string `yaml:"user"`
	Password    Secret `yaml:"password"`
	InboxPrefix string `yaml:"inbox_prefix"`
	APIPrefix   string `yaml:"js_api_prefix"`
}

// Settings are hq run's settings file (configs/hq.yaml): a section per
// job, each validated by Check with every problem at once, naming the
// file and the field.
type Settings struct {
	// Listen serves /metrics, /readyz and /healthz: on loopback, or
	// elsewhere only with ListenToken, which /metrics and /readyz then
	// ask for (a bearer token; /healthz answers anyone).
	Listen      string `yaml:"listen"`
	ListenToken Secret `yaml:"listen_token"`
	// ConnectTimeout bounds a batch run's wait for PostgreSQL or central
	// (hq sink --until-caught-up …); the service retries.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	StopTimeout    time.Duration `yaml:"stop_timeout"`
	// StateDir holds the witness's state and the console's journal:
	// default $STATE_DIRECTORY (systemd's StateDirectory), else ".".
	StateDir string `yaml:"state_dir"`
	// Roster is the roster file: the stores and their ledger keys.
	Roster   string `yaml:"roster"`
	Postgres struct {
		URL      string `yaml:"url"`
		Password Secret `yaml:"password"`
	} `yaml:"postgres"`
	NATS struct {
		Servers    string   `yaml:"servers"`
		CA         string   `yaml:"ca"`
		Partitions int      `yaml:"partitions"`
		Audit      Identity `yaml:"audit"`
		Witness    Identity `yaml:"witness"`
		Ops        Identity `yaml:"ops"`
		// OperatorKey signs the ledger and reconcile commands the
		// stores answer (hq keys operator); none asks no store.
		OperatorKey Secret `yaml:"operator_key"`
	} `yaml:"nats"`
	Sink struct {
		Enabled       *bool         `yaml:"enabled"`
		Batch         int           `yaml:"batch"`
		FlushInterval time.Duration `yaml:"flush_interval"`
	} `yaml:"sink"`
	Witness struct {
		Enabled    *bool  `yaml:"enabled"`
		SigningKey Secret `yaml:"signing_key"`
		PublicKey  string `yaml:"public_key"`
		// StateFile is the witness's signed state; default
		// state_dir/witness.state.
		StateFile string        `yaml:"state_file"`
		Interval  time.Duration `yaml:"interval"`
	} `yaml:"witness"`
	Verify struct {
		Enabled       *bool         `yaml:"enabled"`
		Interval      time.Duration `yaml:"interval"`
		RecheckBudget int64         `yaml:"recheck_budget"`
	} `yaml:"verify"`
	Reconcile struct {
		Enabled  *bool         `yaml:"enabled"`
		Interval time.Duration `yaml:"interval"`
		Grace    time.Duration `yaml:"grace"`
	} `yaml:"reconcile"`
	Fleet struct {
		Enabled  *bool         `yaml:"enabled"`
		Interval time.Duration `yaml:"interval"`
		Stale    time.Duration `yaml:"stale"`
		Silent   time.Duration `yaml:"silent"`
		MaxAge   time.Duration `yaml:"max_age"`
	} `yaml:"fleet"`
	Console *console.Settings `yaml:"console"`
}

// MaxSettingsBytes bounds hq run's settings file.
const MaxSettingsBytes = 1 << 20

// LoadSettings reads a settings file (a regular file of at most
// MaxSettingsBytes: a FIFO in its place is refused, not waited on); an
// unknown key is an error that names the file.
func LoadSettings(path string) (Settings, error) {
	var s Settings
	b, err := disk.ReadRegular(path, MaxSettingsBytes)
	if err != nil {
		return s, fmt.Errorf("hq settings: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return s, fmt.Errorf("hq settings %s: %w", path, err)
	}
	return s, nil
}

// On says whether a job's section leaves it enabled (the default).
func On(enabled *bool) bool { return enabled == nil || *enabled }

// Problems gathers a file's problems, each naming its field.
type Problems struct {
	file string
	list []string
}

// Add adds a problem of field.
func (p *Problems) Add(field, format string, args ...any) {
	p.list = append(p.list, p.file+": "+field+": "+fmt.Sprintf(format, args...))
}

// Err is every problem at once, or nil.
func (p *Problems) Err() error {
	if len(p.list) == 0 {
		return nil
	}
	return errors.New(strings.Join(p.list, "\n"))
}

// Check fills the defaults and returns every problem of s at once, each
// naming file and its field. Files it names are not read here, but
// secrets are found (ReadSecret reads them when connecting).
func (s *Settings) Check(file string, getenv func(string) string) error {
	p := &Problems{file: file}
	if s.Listen == "" {
		s.Listen = DefaultListen
	}
	if s.StateDir == "" {
		s.StateDir = getenv("STATE_DIRECTORY")
	}
	if s.StateDir == "" {
		s.StateDir = "."
	}
	if s.ConnectTimeout == 0 {
		s.ConnectTimeout = DefaultConnectTimeout
	}
	if s.StopTimeout == 0 {
		s.StopTimeout = DefaultStopTimeout
	}
	positive := func(field string, d time.Duration) {
		if d < 0 {
			p.Add(field, "must not be negative")
		}
	}
	checkSecret(p, "listen_token", s.ListenToken, getenv)
	guarded := s.ListenToken.File != "" || s.ListenToken.Credential != ""
	if err := (listen.Rule{Field: "listen", Example: DefaultListen,
		Guard: "also set listen_token, which /metrics and /readyz then ask for"}).Check(s.Listen, guarded); err != nil {
		p.Add("listen", "%s", strings.TrimPrefix(err.Error(), "listen: "))
	}
	positive("connect_timeout", s.ConnectTimeout)
	positive("stop_timeout", s.StopTimeout)
	needPG := On(s.Sink.Enabled) || On(s.Verify.Enabled) || On(s.Witness.Enabled) || On(s.Reconcile.Enabled)
	if needPG && s.Postgres.URL == "" {
		p.Add("postgres.url", "is required: the jobs take their leases, and the sink and verification write, in PostgreSQL")
	}
	if s.Postgres.URL != "" {
		set := sink.Settings{}
		set.Postgres.URL = s.Postgres.URL
		if _, err := set.PostgresConfig(); errors.Is(err, sink.ErrSetting) {
			p.Add("postgres.url", "%v", err)
		}
	}
	checkSecret(p, "postgres.password", s.Postgres.Password, getenv)
	if s.NATS.Servers == "" {
		p.Add("nats.servers", "is required: central's servers")
	}
	if s.NATS.Partitions < 1 {
		p.Add("nats.partitions", "must be at least 1: central's partitions (hq provision --partitions), which name the archives")
	}
	for name, id := range map[string]Identity{"audit": s.NATS.Audit, "witness": s.NATS.Witness, "ops": s.NATS.Ops} {
		checkSecret(p, "nats."+name+".password", id.Password, getenv)
	}
	checkSecret(p, "nats.operator_key", s.NATS.OperatorKey, getenv)
	if s.Roster == "" && (On(s.Witness.Enabled) || On(s.Verify.Enabled)) {
		p.Add("roster", "is required by the witness and verification: the stores and their ledger keys")
	}
	s.checkJobs(p, getenv)
	if s.Console != nil && !On(s.Fleet.Enabled) {
		p.Add("console", "needs the fleet watch (fleet.enabled): its pages read the fleet index")
	}
	if s.Console != nil {
		if _, err := s.Console.Options("console"); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				p.list = append(p.list, file+": "+line)
			}
		}
	}
	return p.Err()
}

// checkJobs checks the jobs' sections and fills their defaults.
func (s *Settings) checkJobs(p *Problems, getenv func(string) string) {
	if s.Sink.Batch < 0 {
		p.Add("sink.batch", "must not be negative")
	}
	if On(s.Witness.Enabled) {
		if s.Witness.SigningKey == (Secret{}) {
			p.Add("witness.signing_key", "is required (file or credential): the witness's private key (hq witness-key)")
		}
		checkSecret(p, "witness.signing_key", s.Witness.SigningKey, getenv)
		if s.Witness.StateFile == "" {
			s.Witness.StateFile = filepath.Join(s.StateDir, "witness.state")
		}
	}
	def := func(d *time.Duration, v time.Duration, field string) {
		if *d == 0 {
			*d = v
		}
		if *d < 0 {
			p.Add(field, "must be positive")
		}
	}
	def(&s.Witness.Interval, DefaultWitnessInterval, "witness.interval")
	def(&s.Verify.Interval, DefaultVerifyInterval, "verify.interval")
	def(&s.Reconcile.Interval, DefaultReconcileInterval, "reconcile.interval")
	def(&s.Fleet.Interval, DefaultWatchInterval, "fleet.interval")
	positive := func(field string, d time.Duration) {
		if d < 0 {
			p.Add(field, "must not be negative")
		}
	}
	positive("reconcile.grace", s.Reconcile.Grace)
	positive("fleet.stale", s.Fleet.Stale)
	positive("fleet.silent", s.Fleet.Silent)
	positive("fleet.max_age", s.Fleet.MaxAge)
	if s.Fleet.Stale > 0 && s.Fleet.Silent > 0 && s.Fleet.Silent < s.Fleet.Stale {
		p.Add("fleet.silent", "%s is less than fleet.stale (%s): a store is stale before it is silent", s.Fleet.Silent, s.Fleet.Stale)
	}
}

// checkSecret checks that a secret names one place, and that a
// credential can be found.
func checkSecret(p *Problems, field string, s Secret, getenv func(string) string) {
	switch {
	case s.File != "" && s.Credential != "":
		p.Add(field, "give file or credential, not both")
	case s.Credential != "" && (strings.ContainsAny(s.Credential, `/\`) || s.Credential == "." || s.Credential == ".."):
		p.Add(field+".credential", "%q is not a credential's name (LoadCredential=NAME:PATH)", s.Credential)
	case s.Credential != "" && getenv(CredentialsEnv) == "":
		p.Add(field+".credential", "needs the service's credentials (systemd LoadCredential=%s:…); %s is not set", s.Credential, CredentialsEnv)
	}
}

// Path is where the secret's file is: its file, or the credential in
// the service's credentials directory; "" when none is named.
func (s Secret) Path(getenv func(string) string) string {
	if s.Credential != "" {
		return filepath.Join(getenv(CredentialsEnv), s.Credential)
	}
	return s.File
}

// Read reads the secret (secret.ReadFile); "" when none is named. The
// error names the file, never its content.
func (s Secret) Read(getenv func(string) string) (string, error) {
	path := s.Path(getenv)
	if path == "" {
		return "", nil
	}
	return secret.ReadFile(path)
}
