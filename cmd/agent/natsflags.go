package main

import (
	"errors"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/rxedge/agent/headoffice/natsconn"
	"github.com/rxedge/agent/internal/cli"
)

// natsFlags are how a CLI command (provision, remote) reaches a NATS
// server: its URL and the same ways to authenticate as the agent. Each
// setting comes from the flags, else from the nats CLI's environment
// variables (NATS_URL, NATS_USER, ...), else from a nats CLI context
// (--context NAME, NATS_CONTEXT, or the context the nats CLI selected).
type natsFlags struct {
	server      string
	user        string
	password    string
	token       string
	nkeySeed    string
	creds       string
	ca          string
	cert        string
	key         string
	inboxPrefix string
	context     string
	timeout     time.Duration

	// getenv reads the environment; os.Getenv when nil.
	getenv func(string) string
}

func (f *natsFlags) register(fs *pflag.FlagSet, defaultInbox string) {
	fs.StringVar(&f.server, "server", "", "NATS server URL(s), comma-separated (env NATS_URL; required unless a nats context names them)")
	fs.StringVar(&f.user, "user", "", "user name (env NATS_USER)")
	fs.StringVar(&f.password, "password", "", "password (prefer the environment variable NATS_PASSWORD or RXEDGE_NATS_PASSWORD)")
	fs.StringVar(&f.token, "token", "", "authentication token (env NATS_TOKEN)")
	fs.StringVar(&f.nkeySeed, "nkey-seed", "", "NKey seed file to authenticate with (env NATS_NKEY)")
	fs.StringVar(&f.creds, "creds", "", ".creds file to authenticate with (env NATS_CREDS)")
	fs.StringVar(&f.ca, "ca", "", "CA certificate file for TLS (env NATS_CA)")
	fs.StringVar(&f.cert, "cert", "", "client certificate file for TLS (env NATS_CERT)")
	fs.StringVar(&f.key, "key", "", "client key file for TLS (env NATS_KEY)")
	fs.StringVar(&f.inboxPrefix, "inbox-prefix", defaultInbox, "inbox prefix for replies; default _INBOX_<user> with a user (the server grants each user its own) (env NATS_INBOX_PREFIX)")
	fs.StringVar(&f.context, "context", "", "nats CLI context to read the server and credentials from (env NATS_CONTEXT; default the nats CLI's selected context)")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "how long to wait for the server")
}

// setting is one connection setting and where it came from: a flag, an
// environment variable, or a context file.
type setting struct{ value, from string }

// natsSettings are the resolved connection settings.
type natsSettings struct {
	servers, user, password, token, nkeySeed, creds, ca, cert, key, inbox setting
}

// flagName is the flag of each setting.
var flagName = map[string]string{natsconn.FieldServers: "--server", natsconn.FieldUser: "--user", natsconn.FieldPassword: "--password",
	natsconn.FieldToken: "--token", natsconn.FieldNKeySeed: "--nkey-seed", natsconn.FieldCreds: "--creds", natsconn.FieldCA: "--ca",
	natsconn.FieldCert: "--cert", natsconn.FieldKey: "--key", natsconn.FieldInbox: "--inbox-prefix"}

// resolve merges the flags, the environment and a context: flags win over
// the environment, the environment over the context (natsconn.Resolve).
func (f *natsFlags) resolve() (natsSettings, error) {
	s, err := f.settings()
	if err != nil {
		return natsSettings{}, err
	}
	c := func(s natsconn.Setting) setting { return setting{s.Value, s.From} }
	return natsSettings{servers: c(s.Servers), user: c(s.User), password: c(s.Password), token: c(s.Token), nkeySeed: c(s.NKeySeed),
		creds: c(s.Creds), ca: c(s.CA), cert: c(s.Cert), key: c(s.Key), inbox: c(s.Inbox)}, nil
}

// settings are resolve's, as natsconn has them; an invalid setting is a
// usage error.
func (f *natsFlags) settings() (natsconn.Settings, error) {
	getenv := f.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	flags := &natsconn.Layer{
		Values: natsconn.Values{Servers: f.server, User: f.user, Password: f.password, Token: f.token, NKeySeed: f.nkeySeed,
			Creds: f.creds, CA: f.ca, Cert: f.cert, Key: f.key, Inbox: f.inboxPrefix},
		From: func(field string) string { return flagName[field] },
	}
	layers := []*natsconn.Layer{flags, natsconn.Environment(getenv)}
	ctx, err := natsconn.Context(f.context, "--context", getenv)
	if ctx != nil {
		layers = append(layers, ctx)
	}
	var s natsconn.Settings
	if err == nil {
		s, err = natsconn.Resolve(layers...)
	}
	return s, settingError(err)
}

// settingError makes a natsconn.ErrSetting a usage error (exit 2).
func settingError(err error) error {
	if errors.Is(err, natsconn.ErrSetting) {
		return cli.UsageError("%v", err)
	}
	return err
}

// asUser is f with its identity replaced by user and password: the
// servers and TLS settings still come from f, the flags, the environment
// or a context.
func (f natsFlags) asUser(user, password string) *natsFlags {
	f.user, f.password, f.token, f.nkeySeed, f.creds, f.inboxPrefix = user, password, "", "", "", ""
	return &f
}

// connect dials the server with the resolved settings (natsconn.Connect:
// errors name where the server and the credentials came from, never a
// password).
func (f *natsFlags) connect(name string) (*nats.Conn, error) {
	s, err := f.settings()
	if err != nil {
		return nil, err
	}
	nc, err := natsconn.Connect(name, s, f.timeout)
	return nc, settingError(err)
}
