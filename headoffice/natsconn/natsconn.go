// Package natsconn resolves how head office's commands reach a NATS
// server, the way the nats CLI does: each setting comes from the first
// source that gives it (the command's flags, Flags, then the nats CLI's
// environment variables NATS_URL, NATS_USER, …, then a nats CLI context
// file), and each resolved setting says where it came from, so an error
// can name its source without showing a secret. The credentials (user and
// password, token, NKey seed or .creds file) come as one from the first
// source that names an identity, never mixed from several.
//
// Its promise: nothing it returns shows a credential. The resolved
// servers hold none (credentials in a server URL become the identity, and
// a URL that does not parse is refused showing it redacted), and Connect,
// the one way head office's commands reach central, scrubs nats.go's
// errors of the password and token it was given.
package natsconn

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rxedge/agent/central"
)

// Field names, the keys of Layer.From.
const (
	FieldServers  = "servers"
	FieldUser     = "user"
	FieldPassword = "password"
	FieldToken    = "token"
	FieldNKeySeed = "nkey_seed"
	FieldCreds    = "creds"
	FieldCA       = "ca"
	FieldCert     = "cert"
	FieldKey      = "key"
	FieldInbox    = "inbox"
)

// Setting is one connection setting and where it came from: a flag, an
// environment variable, or a context file.
type Setting struct{ Value, From string }

// Settings are the resolved connection settings.
type Settings struct {
	Servers, User, Password, Token, NKeySeed, Creds, CA, Cert, Key, Inbox Setting
}

// Values are the settings one source gives ("" for none).
type Values struct {
	Servers, User, Password, Token, NKeySeed, Creds, CA, Cert, Key, Inbox string
}

// Layer is one source of settings: the flags, the environment, or a
// context.
type Layer struct {
	Values
	// From names where each field (Field…) came from in this layer.
	From func(field string) string
}

func (l *Layer) setting(field, v string) Setting {
	if v == "" {
		return Setting{}
	}
	return Setting{v, l.From(field)}
}

// ErrSetting marks an error in what the user gave (a context that does
// not exist, two identities in one source), as opposed to one of the
// system: the command line or the context is to be fixed.
var ErrSetting = errors.New("natsconn: invalid setting")

// settingError is an error of ErrSetting.
type settingError string

func (e settingError) Error() string        { return string(e) }
func (e settingError) Is(target error) bool { return target == ErrSetting }

func invalid(format string, args ...any) error { return settingError(fmt.Sprintf(format, args...)) }

// envName is the nats CLI's variable of each field.
var envName = map[string]string{FieldServers: "NATS_URL", FieldUser: "NATS_USER", FieldPassword: "NATS_PASSWORD", FieldToken: "NATS_TOKEN",
	FieldNKeySeed: "NATS_NKEY", FieldCreds: "NATS_CREDS", FieldCA: "NATS_CA", FieldCert: "NATS_CERT", FieldKey: "NATS_KEY", FieldInbox: "NATS_INBOX_PREFIX"}

// Environment is the layer of the nats CLI's environment variables, and
// RXEDGE_NATS_PASSWORD for the password when NATS_PASSWORD is not set.
func Environment(getenv func(string) string) *Layer {
	password, passwordVar := getenv("NATS_PASSWORD"), "NATS_PASSWORD"
	if password == "" {
		password, passwordVar = getenv("RXEDGE_NATS_PASSWORD"), "RXEDGE_NATS_PASSWORD"
	}
	v := func(f string) string { return getenv(envName[f]) }
	return &Layer{
		Values: Values{Servers: v(FieldServers), User: v(FieldUser), Password: password, Token: v(FieldToken), NKeySeed: v(FieldNKeySeed),
			Creds: v(FieldCreds), CA: v(FieldCA), Cert: v(FieldCert), Key: v(FieldKey), Inbox: v(FieldInbox)},
		From: func(field string) string {
			if field == FieldPassword {
				return passwordVar
			}
			return envName[field]
		},
	}
}

// Resolve merges layers, the first winning: each setting from the first
// layer that gives it; the credentials as one from the first layer that
// names an identity, with only the password possibly from another: the
// first of that layer, the ones above it and the second layer (the
// environment's password serves a user of any source). A user without an
// inbox prefix gets its own, central.InboxPrefix.
//
// The servers come out without credentials, whatever source gave them,
// so no message that shows them can show a password. Credentials in the
// server URLs (nats://user:password@host, nats://token@host) are the
// identity of the layer that gave the servers, when that layer names no
// other (a user, token, seed or creds file of its own wins over them). A
// server URL that does not parse is an ErrSetting that shows it redacted.
func Resolve(layers ...*Layer) (Settings, error) {
	first := func(field string, get func(v Values) string) Setting {
		for _, l := range layers {
			if v := get(l.Values); v != "" {
				return Setting{v, l.From(field)}
			}
		}
		return Setting{}
	}
	s := Settings{
		Servers: first(FieldServers, func(v Values) string { return v.Servers }),
		CA:      first(FieldCA, func(v Values) string { return v.CA }),
		Cert:    first(FieldCert, func(v Values) string { return v.Cert }),
		Key:     first(FieldKey, func(v Values) string { return v.Key }),
		Inbox:   first(FieldInbox, func(v Values) string { return v.Inbox }),
	}
	servers, urlID, err := parseServers(s.Servers.Value, s.Servers.From)
	if err != nil {
		return Settings{}, err
	}
	s.Servers.Value = servers
	serversLayer := slices.IndexFunc(layers, func(l *Layer) bool { return l.Servers != "" })
	if err := identity(&s, layers, serversLayer, urlID); err != nil {
		return s, err
	}
	if s.Inbox.Value == "" && s.User.Value != "" {
		s.Inbox = Setting{central.InboxPrefix(s.User.Value), "the user (" + s.User.From + ")"}
	}
	return s, nil
}

// identity sets s's credentials from the first layer that names an
// identity. The credentials urlID of the servers' URLs are the identity of
// the layer that gave the servers (serversLayer) when that layer names
// no other: a flag wins over them, and they over a context's.
func identity(s *Settings, layers []*Layer, serversLayer int, urlID *urlIdentity) error {
	for i, l := range layers {
		var named []string
		for _, id := range []struct{ field, v string }{{FieldUser, l.User}, {FieldToken, l.Token}, {FieldNKeySeed, l.NKeySeed}, {FieldCreds, l.Creds}} {
			if id.v != "" {
				named = append(named, l.From(id.field))
			}
		}
		if len(named) == 0 && i == serversLayer && urlID != nil {
			from := "the server URL (" + s.Servers.From + ")"
			if urlID.token != "" {
				s.Token = Setting{urlID.token, from}
			} else {
				s.User, s.Password = Setting{urlID.user, from}, Setting{urlID.password, from}
			}
			return nil
		}
		if len(named) == 0 {
			continue
		}
		if len(named) > 1 {
			return invalid("choose one way to authenticate: %s are all set", strings.Join(named, ", "))
		}
		s.User, s.Token = l.setting(FieldUser, l.User), l.setting(FieldToken, l.Token)
		s.NKeySeed, s.Creds = l.setting(FieldNKeySeed, l.NKeySeed), l.setting(FieldCreds, l.Creds)
		if l.User != "" {
			for _, above := range layers[:min(max(i+1, 2), len(layers))] {
				if above.Password != "" {
					s.Password = Setting{above.Password, above.From(FieldPassword)}
					break
				}
			}
		}
		return nil
	}
	return nil
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

// configDir is the nats CLI's configuration directory: under
// XDG_CONFIG_HOME, else ~/.config, as the nats CLI finds it.
func configDir(getenv func(string) string) (string, error) {
	if p := getenv("XDG_CONFIG_HOME"); p != "" {
		return filepath.Join(p, "nats"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".config", "nats"), nil
}

// Context loads the nats CLI context named name (given by how, e.g.
// "--context"), else the one NATS_CONTEXT names, else the one the nats
// CLI selected (context.txt); nil when none is named or selected.
func Context(name, how string, getenv func(string) string) (*Layer, error) {
	if name == "" {
		name, how = getenv("NATS_CONTEXT"), "NATS_CONTEXT"
	}
	dir, err := configDir(getenv)
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
		return nil, invalid("nats context %q (%s) is not a context name", name, how)
	}
	path := filepath.Join(dir, "context", name+".json")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, invalid("nats context %q (%s) does not exist: no file %s (list them with `nats context ls`)", name, how, path)
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
	return &Layer{
		Values: Values{Servers: c.URL, User: c.User, Password: c.Password, Token: c.Token, NKeySeed: c.NKey, Creds: c.Creds,
			CA: c.CA, Cert: c.Cert, Key: c.Key, Inbox: c.InboxPrefix},
		From: func(string) string { return label },
	}, nil
}
