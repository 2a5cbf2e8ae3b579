package main

import (
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/rxedge/agent/central"
)

// natsFlags are how a CLI command (provision, remote) reaches a NATS
// server: its URL and the same ways to authenticate as the agent.
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
	timeout     time.Duration
}

func (f *natsFlags) register(fs *pflag.FlagSet, defaultInbox string) {
	fs.StringVar(&f.server, "server", "", "NATS server URL(s), comma-separated (required)")
	fs.StringVar(&f.user, "user", "", "user name")
	fs.StringVar(&f.password, "password", "", "password (prefer the environment variable RXEDGE_NATS_PASSWORD)")
	fs.StringVar(&f.token, "token", "", "authentication token")
	fs.StringVar(&f.nkeySeed, "nkey-seed", "", "NKey seed file to authenticate with")
	fs.StringVar(&f.creds, "creds", "", ".creds file to authenticate with")
	fs.StringVar(&f.ca, "ca", "", "CA certificate file for TLS")
	fs.StringVar(&f.cert, "cert", "", "client certificate file for TLS")
	fs.StringVar(&f.key, "key", "", "client key file for TLS")
	fs.StringVar(&f.inboxPrefix, "inbox-prefix", defaultInbox, "inbox prefix for replies; default _INBOX_<user> with --user (the server grants each user its own)")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "how long to wait for the server")
}

// connect dials the server with the flags' credentials.
func (f *natsFlags) connect(name string) (*nats.Conn, error) {
	if f.server == "" {
		return nil, usageError("--server URL is required")
	}
	opts := []nats.Option{nats.Name(name), nats.Timeout(f.timeout)}
	if f.password == "" {
		f.password = os.Getenv("RXEDGE_NATS_PASSWORD")
	}
	set := 0
	for _, s := range []string{f.user, f.token, f.nkeySeed, f.creds} {
		if s != "" {
			set++
		}
	}
	if set > 1 {
		return nil, usageError("choose one of --user, --token, --nkey-seed and --creds")
	}
	switch {
	case f.user != "":
		opts = append(opts, nats.UserInfo(f.user, f.password))
	case f.token != "":
		opts = append(opts, nats.Token(f.token))
	case f.nkeySeed != "":
		o, err := nats.NkeyOptionFromSeed(f.nkeySeed)
		if err != nil {
			return nil, fmt.Errorf("--nkey-seed: %w", err)
		}
		opts = append(opts, o)
	case f.creds != "":
		opts = append(opts, nats.UserCredentials(f.creds))
	}
	if f.ca != "" {
		opts = append(opts, nats.RootCAs(f.ca))
	}
	if f.cert != "" || f.key != "" {
		if f.cert == "" || f.key == "" {
			return nil, usageError("--cert and --key go together")
		}
		opts = append(opts, nats.ClientCert(f.cert, f.key))
	}
	inbox := f.inboxPrefix
	if inbox == "" && f.user != "" {
		inbox = central.InboxPrefix(f.user)
	}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	nc, err := nats.Connect(f.server, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", f.server, err)
	}
	return nc, nil
}
