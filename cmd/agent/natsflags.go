package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/internal/redact"
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

// natsLayer is one source of settings: the flags, the environment, or a
// context.
type natsLayer struct {
	name string // for messages: "flags", "environment", `context "prod" (path)`
	// from names where each field came from in this layer.
	from                                                                  func(field string) string
	servers, user, password, token, nkeySeed, creds, ca, cert, key, inbox string
}

// setting is the value of field in l, with where it came from when set.
func (l *natsLayer) setting(field, v string) setting {
	if v == "" {
		return setting{}
	}
	return setting{v, l.from(field)}
}

// natsContext is a nats CLI context file: the fields the agent reads.
type natsContext struct {
	URL         string `json:"url"`
	User        string `json:"user"`
	Password    string `json:"password"`
	Token       string `json:"token"`
	Creds       string `json:"creds"`
	NKey        string `json:"nkey"`
	Cert        string `json:"cert"`
	Key         string `json:"key"`
	CA          string `json:"ca"`
	InboxPrefix string `json:"inbox_prefix"`
	NSC         string `json:"nsc"`
}

// natsConfigDir is the nats CLI's configuration directory: under
// XDG_CONFIG_HOME, else ~/.config, as the nats CLI finds it.
func natsConfigDir(getenv func(string) string) (string, error) {
	if p := getenv("XDG_CONFIG_HOME"); p != "" {
		return filepath.Join(p, "nats"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".config", "nats"), nil
}

// contextLayer loads the context named by --context, NATS_CONTEXT or the
// nats CLI's selection (context.txt); nil when none is named or selected.
func (f *natsFlags) contextLayer(getenv func(string) string) (*natsLayer, error) {
	name, how := f.context, "--context"
	if name == "" {
		name, how = getenv("NATS_CONTEXT"), "NATS_CONTEXT"
	}
	dir, err := natsConfigDir(getenv)
	if err != nil {
		if name == "" {
			return nil, nil
		}
		return nil, fmt.Errorf("nats context %q (%s): cannot find the nats configuration directory: %w", name, how, err)
	}
	if name == "" {
		b, err := os.ReadFile(filepath.Join(dir, "context.txt"))
		if err != nil {
			return nil, nil // no selected context: not an error
		}
		name, how = strings.TrimSpace(string(b)), "selected in "+filepath.Join(dir, "context.txt")
		if name == "" {
			return nil, nil
		}
	}
	if strings.ContainsAny(name, `/\`) || strings.Contains(name, "..") {
		return nil, usageError("nats context %q (%s) is not a context name", name, how)
	}
	path := filepath.Join(dir, "context", name+".json")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, usageError("nats context %q (%s) does not exist: no file %s (list them with `nats context ls`)", name, how, path)
	}
	if err != nil {
		return nil, fmt.Errorf("nats context %q (%s): %w", name, how, err)
	}
	var c natsContext
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("nats context %q: %s is not a context file: %w", name, path, err)
	}
	label := fmt.Sprintf("context %q (%s)", name, path)
	if c.NSC != "" && c.URL == "" && c.Creds == "" {
		return nil, fmt.Errorf("%s takes its server and credentials from nsc, which agent commands do not run: give --server and --creds", label)
	}
	return &natsLayer{
		name: label, from: func(string) string { return label },
		servers: c.URL, user: c.User, password: c.Password, token: c.Token, nkeySeed: c.NKey, creds: c.Creds,
		ca: c.CA, cert: c.Cert, key: c.Key, inbox: c.InboxPrefix,
	}, nil
}

// resolve merges the flags, the environment and a context: flags win over
// the environment, the environment over the context. The credentials
// (user and password, token, nkey seed or creds) come as one from the
// first source that names an identity; only the password may come from a
// source above it (--password or NATS_PASSWORD for a context's user).
func (f *natsFlags) resolve() (natsSettings, error) {
	getenv := f.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	flagName := map[string]string{"servers": "--server", "user": "--user", "password": "--password", "token": "--token",
		"nkey_seed": "--nkey-seed", "creds": "--creds", "ca": "--ca", "cert": "--cert", "key": "--key", "inbox": "--inbox-prefix"}
	envName := map[string]string{"servers": "NATS_URL", "user": "NATS_USER", "password": "NATS_PASSWORD", "token": "NATS_TOKEN",
		"nkey_seed": "NATS_NKEY", "creds": "NATS_CREDS", "ca": "NATS_CA", "cert": "NATS_CERT", "key": "NATS_KEY", "inbox": "NATS_INBOX_PREFIX"}
	password, passwordVar := getenv("NATS_PASSWORD"), "NATS_PASSWORD"
	if password == "" {
		password, passwordVar = getenv("RXEDGE_NATS_PASSWORD"), "RXEDGE_NATS_PASSWORD"
	}
	layers := []*natsLayer{
		{name: "flags", from: func(field string) string { return flagName[field] },
			servers: f.server, user: f.user, password: f.password, token: f.token, nkeySeed: f.nkeySeed, creds: f.creds,
			ca: f.ca, cert: f.cert, key: f.key, inbox: f.inboxPrefix},
		{name: "environment", from: func(field string) string {
			if field == "password" {
				return passwordVar
			}
			return envName[field]
		},
			servers: getenv("NATS_URL"), user: getenv("NATS_USER"), password: password, token: getenv("NATS_TOKEN"),
			nkeySeed: getenv("NATS_NKEY"), creds: getenv("NATS_CREDS"), ca: getenv("NATS_CA"), cert: getenv("NATS_CERT"),
			key: getenv("NATS_KEY"), inbox: getenv("NATS_INBOX_PREFIX")},
	}
	ctxLayer, err := f.contextLayer(getenv)
	if err != nil {
		return natsSettings{}, err
	}
	if ctxLayer != nil {
		layers = append(layers, ctxLayer)
	}

	var s natsSettings
	first := func(field string, get func(l *natsLayer) string) setting {
		for _, l := range layers {
			if v := get(l); v != "" {
				return setting{v, l.from(field)}
			}
		}
		return setting{}
	}
	s.servers = first("servers", func(l *natsLayer) string { return l.servers })
	s.ca = first("ca", func(l *natsLayer) string { return l.ca })
	s.cert = first("cert", func(l *natsLayer) string { return l.cert })
	s.key = first("key", func(l *natsLayer) string { return l.key })
	s.inbox = first("inbox", func(l *natsLayer) string { return l.inbox })
	for i, l := range layers {
		var named []string
		for _, id := range []struct{ field, v string }{{"user", l.user}, {"token", l.token}, {"nkey_seed", l.nkeySeed}, {"creds", l.creds}} {
			if id.v != "" {
				named = append(named, l.from(id.field))
			}
		}
		if len(named) == 0 {
			continue
		}
		if len(named) > 1 {
			return s, usageError("choose one way to authenticate: %s are all set", strings.Join(named, ", "))
		}
		s.user = l.setting("user", l.user)
		s.token = l.setting("token", l.token)
		s.nkeySeed = l.setting("nkey_seed", l.nkeySeed)
		s.creds = l.setting("creds", l.creds)
		if l.user != "" {
			// The environment's password serves a user of any source.
			for _, above := range layers[:max(i+1, 2)] {
				if above.password != "" {
					s.password = setting{above.password, above.from("password")}
					break
				}
			}
		}
		break
	}
	if s.inbox.value == "" && s.user.value != "" {
		s.inbox = setting{central.InboxPrefix(s.user.value), "the user (" + s.user.from + ")"}
	}
	return s, nil
}

// asUser is f with its identity replaced by user and password: the
// servers and TLS settings still come from f, the flags, the environment
// or a context.
func (f natsFlags) asUser(user, password string) *natsFlags {
	f.user, f.password, f.token, f.nkeySeed, f.creds, f.inboxPrefix = user, password, "", "", "", ""
	return &f
}

// connect dials the server with the resolved settings. Errors name where
// the server and the credentials came from, never a password.
func (f *natsFlags) connect(name string) (*nats.Conn, error) {
	s, err := f.resolve()
	if err != nil {
		return nil, err
	}
	if s.servers.value == "" {
		return nil, usageError("--server URL is required (or set NATS_URL, or name a nats CLI context with --context NAME)")
	}
	opts := []nats.Option{nats.Name(name), nats.Timeout(f.timeout)}
	identity := "no credentials"
	switch {
	case s.user.value != "":
		opts = append(opts, nats.UserInfo(s.user.value, s.password.value))
		identity = fmt.Sprintf("user %q from %s", s.user.value, s.user.from)
		if s.password.value != "" {
			identity += ", password from " + s.password.from
		}
	case s.token.value != "":
		opts = append(opts, nats.Token(s.token.value))
		identity = "token from " + s.token.from
	case s.nkeySeed.value != "":
		o, err := nats.NkeyOptionFromSeed(s.nkeySeed.value)
		if err != nil {
			return nil, fmt.Errorf("nkey seed file %s (from %s): %w", s.nkeySeed.value, s.nkeySeed.from, err)
		}
		opts = append(opts, o)
		identity = "nkey seed " + s.nkeySeed.value + " from " + s.nkeySeed.from
	case s.creds.value != "":
		if _, err := os.Stat(s.creds.value); err != nil {
			return nil, fmt.Errorf("creds file (from %s): %w", s.creds.from, err)
		}
		opts = append(opts, nats.UserCredentials(s.creds.value))
		identity = "creds " + s.creds.value + " from " + s.creds.from
	}
	if s.ca.value != "" {
		opts = append(opts, nats.RootCAs(s.ca.value))
	}
	if s.cert.value != "" || s.key.value != "" {
		if s.cert.value == "" || s.key.value == "" {
			return nil, usageError("a client certificate needs both a certificate and a key: got only %s", or(s.cert.from, s.key.from))
		}
		opts = append(opts, nats.ClientCert(s.cert.value, s.key.value))
	}
	if s.inbox.value != "" {
		opts = append(opts, nats.CustomInboxPrefix(s.inbox.value))
	}
	nc, err := nats.Connect(s.servers.value, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s (from %s; %s): %w", redact.URLs(s.servers.value), s.servers.from, identity, err)
	}
	return nc, nil
}
