package natsconn

import (
	"errors"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/rxedge/agent/internal/cli"
)

// Flags are how a head-office command (provision, remote, verify, ...)
// reaches a NATS server: its URL and the same ways to authenticate as the
// agent. Each setting comes from the flags, else from the nats CLI's
// environment variables (NATS_URL, NATS_USER, ...), else from a nats CLI
// context (--context NAME, NATS_CONTEXT, or the context the nats CLI
// selected). Values holds what the flags gave; a command may fill in
// what they left empty (from its settings file) before it connects.
type Flags struct {
	Values
	Context string
	Timeout time.Duration

	// Getenv reads the environment; os.Getenv when nil.
	Getenv func(string) string
}

// Register adds the connection flags to fs; defaultInbox is --inbox-prefix's
// default.
func (f *Flags) Register(fs *pflag.FlagSet, defaultInbox string) {
	fs.StringVar(&f.Servers, "server", "", "NATS server URL(s), comma-separated (env NATS_URL; required unless a nats context names them)")
	fs.StringVar(&f.User, "user", "", "user name (env NATS_USER)")
	fs.StringVar(&f.Password, "password", "", "password (prefer the environment variable NATS_PASSWORD or RXEDGE_NATS_PASSWORD)")
	fs.StringVar(&f.Token, "token", "", "authentication token (env NATS_TOKEN)")
	fs.StringVar(&f.NKeySeed, "nkey-seed", "", "NKey seed file to authenticate with (env NATS_NKEY)")
	fs.StringVar(&f.Creds, "creds", "", ".creds file to authenticate with (env NATS_CREDS)")
	fs.StringVar(&f.CA, "ca", "", "CA certificate file for TLS (env NATS_CA)")
	fs.StringVar(&f.Cert, "cert", "", "client certificate file for TLS (env NATS_CERT)")
	fs.StringVar(&f.Key, "key", "", "client key file for TLS (env NATS_KEY)")
	fs.StringVar(&f.Inbox, "inbox-prefix", defaultInbox, "inbox prefix for replies; default _INBOX_<user> with a user (the server grants each user its own) (env NATS_INBOX_PREFIX)")
	fs.StringVar(&f.Context, "context", "", "nats CLI context to read the server and credentials from (env NATS_CONTEXT; default the nats CLI's selected context)")
	fs.DurationVar(&f.Timeout, "timeout", 5*time.Second, "how long to wait for the server")
}

// flagName is the flag of each setting.
var flagName = map[string]string{FieldServers: "--server", FieldUser: "--user", FieldPassword: "--password",
	FieldToken: "--token", FieldNKeySeed: "--nkey-seed", FieldCreds: "--creds", FieldCA: "--ca",
	FieldCert: "--cert", FieldKey: "--key", FieldInbox: "--inbox-prefix"}

// Settings merges the flags, the environment and a context: flags win
// over the environment, the environment over the context (Resolve). An
// invalid setting is a usage error (exit 2).
func (f *Flags) Settings() (Settings, error) {
	getenv := f.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	flags := &Layer{Values: f.Values, From: func(field string) string { return flagName[field] }}
	layers := []*Layer{flags, Environment(getenv)}
	ctx, err := Context(f.Context, "--context", getenv)
	if ctx != nil {
		layers = append(layers, ctx)
	}
	var s Settings
	if err == nil {
		s, err = Resolve(layers...)
	}
	return s, usage(err)
}

// usage makes an ErrSetting a usage error (exit 2).
func usage(err error) error {
	if errors.Is(err, ErrSetting) {
		return cli.UsageError("%v", err)
	}
	return err
}

// AsUser is f with its identity replaced by user and password: the
// servers and TLS settings still come from f, the flags, the environment
// or a context.
func (f Flags) AsUser(user, password string) *Flags {
	f.User, f.Password, f.Token, f.NKeySeed, f.Creds, f.Inbox = user, password, "", "", "", ""
	return &f
}

// Connect dials the server with the resolved settings (Connect: errors
// name where the server and the credentials came from, never a password).
func (f *Flags) Connect(name string) (*nats.Conn, error) {
	s, err := f.Settings()
	if err != nil {
		return nil, err
	}
	nc, err := Connect(name, s, f.Timeout)
	return nc, usage(err)
}
