package sink

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.yaml.in/yaml/v3"

	"github.com/rxedge/agent/internal/redact"
	"github.com/rxedge/agent/internal/secret"
)

// Settings are the sink's settings file (configs/sink.yaml): what a
// head-office service runs with. Flags override the environment
// (RXEDGE_SINK_*), which overrides the file. Passwords are never in the
// file itself: it names files that hold them.
type Settings struct {
	Postgres struct {
		// URL is the database, without a password (postgres://user@host/db).
		URL          string `yaml:"url"`
		PasswordFile string `yaml:"password_file"`
	} `yaml:"postgres"`
	NATS struct {
		Servers      string `yaml:"servers"`
		User         string `yaml:"user"`
		PasswordFile string `yaml:"password_file"`
		Creds        string `yaml:"creds"`
		NKeySeed     string `yaml:"nkey_seed"`
		CA           string `yaml:"ca"`
		Cert         string `yaml:"cert"`
		Key          string `yaml:"key"`
		InboxPrefix  string `yaml:"inbox_prefix"`
		APIPrefix    string `yaml:"js_api_prefix"`
		Partitions   int    `yaml:"partitions"`
	} `yaml:"nats"`
	// Listen is where /metrics and /readyz are served; empty: not served.
	Listen        string        `yaml:"listen"`
	Batch         int           `yaml:"batch"`
	FlushInterval time.Duration `yaml:"flush_interval"`
	// ConnectTimeout bounds how long a batch run (--until-caught-up)
	// waits for PostgreSQL or central before it fails; zero is
	// DefaultBatchConnectTimeout. A service following the archives
	// retries for as long as it runs.
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
}

// DefaultBatchConnectTimeout is a batch run's bound on waiting for
// PostgreSQL or central (Settings.ConnectTimeout, --connect-timeout).
const DefaultBatchConnectTimeout = time.Minute

// LoadSettings reads a settings file; an unknown key is an error.
func LoadSettings(path string) (Settings, error) {
	var s Settings
	b, err := os.ReadFile(path)
	if err != nil {
		return s, fmt.Errorf("sink settings: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil && !errors.Is(err, io.EOF) {
		return s, fmt.Errorf("sink settings %s: %w", path, err)
	}
	return s, nil
}

// Environment variables read by ApplyEnv.
const (
	EnvPostgres             = "RXEDGE_SINK_POSTGRES"
	EnvPostgresPasswordFile = "RXEDGE_SINK_POSTGRES_PASSWORD_FILE"
	EnvNATSPasswordFile     = "RXEDGE_SINK_NATS_PASSWORD_FILE"
	EnvListen               = "RXEDGE_SINK_LISTEN"
	EnvPartitions           = "RXEDGE_SINK_PARTITIONS"
	EnvAPIPrefix            = "RXEDGE_SINK_JS_API_PREFIX"
)

// ApplyEnv overrides s with the RXEDGE_SINK_* variables that are set.
func (s *Settings) ApplyEnv(getenv func(string) string) error {
	set := func(dst *string, name string) {
		if v := getenv(name); v != "" {
			*dst = v
		}
	}
	set(&s.Postgres.URL, EnvPostgres)
	set(&s.Postgres.PasswordFile, EnvPostgresPasswordFile)
	set(&s.NATS.PasswordFile, EnvNATSPasswordFile)
	set(&s.Listen, EnvListen)
	set(&s.NATS.APIPrefix, EnvAPIPrefix)
	if v := getenv(EnvPartitions); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%s: not a number", EnvPartitions)
		}
		s.NATS.Partitions = n
	}
	return nil
}

// ErrSetting marks a setting the sink cannot work with as given (a
// PostgreSQL URL that does not parse): a usage error to fix, never one to
// wait out. Retryable is false for it.
var ErrSetting = errors.New("sink: invalid setting")

// settingError is an error of ErrSetting.
type settingError string

func (e settingError) Error() string        { return string(e) }
func (e settingError) Is(target error) bool { return target == ErrSetting }

// DefaultConnectTimeout bounds a connection attempt to PostgreSQL when the
// URL sets no connect_timeout.
const DefaultConnectTimeout = 10 * time.Second

// PostgresConfig is the database's connection configuration: Postgres.URL
// (a URL or a key=value connection string) parsed, with the password read
// from Postgres.PasswordFile when one is named, the application name
// rxedge-sink and DefaultConnectTimeout unless the URL sets them. A URL
// that does not parse is an ErrSetting showing it redacted (redact.DSN);
// no error carries a password.
func (s *Settings) PostgresConfig() (*pgxpool.Config, error) {
	u := s.Postgres.URL
	if u == "" {
		return nil, settingError("no PostgreSQL URL is given")
	}
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		// pgx redacts what it quotes as well as it can; its text is
		// scrubbed again of everything in u that could be a credential.
		return nil, settingError(fmt.Sprintf("the PostgreSQL URL %s cannot be used (give postgres://USER@HOST:PORT/DB?sslmode=… or host=… dbname=… key=value pairs): %v",
			redact.DSN(u), redact.Error(err, redact.Secrets(u)...)))
	}
	// pgx ends a URL's user information at its first '@' (libpq's rule),
	// so a password with an unescaped '@' leaves its end in the host,
	// which every connection error would then show. No host has an '@'.
	for _, h := range hosts(cfg) {
		if strings.Contains(h, "@") {
			return nil, settingError(fmt.Sprintf("the PostgreSQL URL %s names a host with an '@' in it: write an '@' in a password as %%40", redact.DSN(u)))
		}
	}
	// pgx hands a key it does not know to the server as a run-time
	// parameter: a URL with a scheme pgx does not take (POSTGRES://,
	// postgress://) is read as one key=value pair, and would send what
	// follows the scheme, a password included, as a parameter's name.
	for k := range cfg.ConnConfig.RuntimeParams {
		if !paramName(k) {
			return nil, settingError(fmt.Sprintf("the PostgreSQL URL %s is not a URL pgx takes (postgres://… or postgresql://…, in lower case) nor key=value pairs: a key is no parameter name", redact.DSN(u)))
		}
	}
	if s.Postgres.PasswordFile != "" {
		pw, err := secret.ReadFile(s.Postgres.PasswordFile)
		if err != nil {
			return nil, err
		}
		cfg.ConnConfig.Password = pw
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "rxedge-sink"
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	return cfg, nil
}

// hosts are the hosts cfg connects to, the fallbacks' included.
func hosts(cfg *pgxpool.Config) []string {
	out := []string{cfg.ConnConfig.Host}
	for _, f := range cfg.ConnConfig.Fallbacks {
		out = append(out, f.Host)
	}
	return out
}

// paramName reports whether k can name a PostgreSQL run-time parameter:
// letters, digits, '_' and '.' (an extension's own, ext.name).
func paramName(k string) bool {
	for _, c := range k {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.') {
			return false
		}
	}
	return k != ""
}
