package natsconn

import (
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/internal/redact"
)

// Connect dials the servers of s (as Resolve gives them) as the client
// name, waiting at most timeout for a server. It is the one way head
// office's commands reach central, so what it promises holds for every
// one of them: an error names where the servers and the credentials came
// from and never shows a credential. The servers hold none (Resolve took
// them out: nats.go, which quotes a URL it cannot parse, is never given
// one that has them), and the text of any error nats.go returns is
// scrubbed of the password and the token all the same. A setting that
// cannot work as given (no servers, half a client certificate) is an
// ErrSetting. extra options come after the settings' (a service's
// nats.RetryOnFailedConnect).
func Connect(name string, s Settings, timeout time.Duration, extra ...nats.Option) (*nats.Conn, error) {
	if s.Servers.Value == "" {
		return nil, invalid("--server URL is required (or set NATS_URL, or name a nats CLI context with --context NAME)")
	}
	if _, id, err := parseServers(s.Servers.Value, s.Servers.From); err != nil {
		return nil, err
	} else if id != nil {
		return nil, invalid("the server URLs (from %s) still carry credentials: resolve the settings first", s.Servers.From)
	}
	opts, identity, err := options(name, s, timeout)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(s.Servers.Value, append(opts, extra...)...)
	if err != nil {
		err = redact.Error(err, s.Password.Value, s.Token.Value)
		return nil, fmt.Errorf("connect to %s (from %s; %s): %w", redact.URLs(s.Servers.Value), s.Servers.From, identity, err)
	}
	return nc, nil
}

// options are the nats.go options of s, and its identity as an error
// shows it: which way, and from where, never a secret.
func options(name string, s Settings, timeout time.Duration) ([]nats.Option, string, error) {
	opts := []nats.Option{nats.Name(name), nats.Timeout(timeout)}
	identity := "no credentials"
	switch {
	case s.User.Value != "":
		opts = append(opts, nats.UserInfo(s.User.Value, s.Password.Value))
		identity = fmt.Sprintf("user %q from %s", s.User.Value, s.User.From)
		if s.Password.Value != "" {
			identity += ", password from " + s.Password.From
		}
	case s.Token.Value != "":
		opts = append(opts, nats.Token(s.Token.Value))
		identity = "token from " + s.Token.From
	case s.NKeySeed.Value != "":
		o, err := nats.NkeyOptionFromSeed(s.NKeySeed.Value)
		if err != nil {
			return nil, "", fmt.Errorf("nkey seed file %s (from %s): %w", s.NKeySeed.Value, s.NKeySeed.From, err)
		}
		opts = append(opts, o)
		identity = "nkey seed " + s.NKeySeed.Value + " from " + s.NKeySeed.From
	case s.Creds.Value != "":
		if _, err := os.Stat(s.Creds.Value); err != nil {
			return nil, "", fmt.Errorf("creds file (from %s): %w", s.Creds.From, err)
		}
		opts = append(opts, nats.UserCredentials(s.Creds.Value))
		identity = "creds " + s.Creds.Value + " from " + s.Creds.From
	}
	if s.CA.Value != "" {
		opts = append(opts, nats.RootCAs(s.CA.Value))
	}
	if s.Cert.Value != "" || s.Key.Value != "" {
		if s.Cert.Value == "" || s.Key.Value == "" {
			return nil, "", invalid("a client certificate needs both a certificate and a key: got only %s", s.Cert.From+s.Key.From)
		}
		opts = append(opts, nats.ClientCert(s.Cert.Value, s.Key.Value))
	}
	if s.Inbox.Value != "" {
		opts = append(opts, nats.CustomInboxPrefix(s.Inbox.Value))
	}
	return opts, identity, nil
}
