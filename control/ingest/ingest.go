// Package ingest is the ingest: section of the agent's configuration: the
// address of the HTTP ingest listener, its bearer token, the bounds of a
// submission, and the other hosts and web origins it answers. Package
// control serves the listener; this package holds its defaults and its
// rules, and imports nothing of the agent but the listener rule
// (internal/listen), so the configuration layer can check the section
// without linking the local API.
package ingest

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/rxedge/agent/internal/listen"
)

// Defaults.
const (
	DefaultListen           = "127.0.0.1:8717"
	DefaultMaxRequestBytes  = 4 << 20
	DefaultMaxMovementBytes = 64 << 10
)

// Config is the ingest: section as the configuration gives it. Zero values
// mean the default.
type Config struct {
	// Listen is host:port, or "off" for no listener.
	Listen    string `yaml:"listen"`
	Token     string `yaml:"token"`
	TokenFile string `yaml:"token_file"`
	// MaxRequestBytes bounds a submission, MaxMovementBytes one movement
	// of it.
	MaxRequestBytes  int64 `yaml:"max_request_bytes"`
	MaxMovementBytes int64 `yaml:"max_movement_bytes"`
	// AllowedHosts and AllowedOrigins open the ingest listener to
	// requests naming another Host, or coming from a web page.
	AllowedHosts   []string `yaml:"allowed_hosts"`
	AllowedOrigins []string `yaml:"allowed_origins"`
}

// Options is the section checked, with every default filled in.
type Options struct {
	Listen           string // "" = no listener
	Token            string // "" = no token required
	MaxRequestBytes  int64
	MaxMovementBytes int64
	AllowedHosts     []string
	AllowedOrigins   []string // without a trailing slash
}

// ListenRule is the rule of ingest.listen: beyond loopback only with a token.
var ListenRule = listen.Rule{
	Field:   "ingest.listen",
	Example: DefaultListen + `, or "off"`,
	Guard:   "also set ingest.token_file so that only the store's software can submit",
}

// Validate checks the section and fills in its defaults. It returns every
// problem, each naming its field (ingest.listen, ingest.token_file, …).
// A host or origin that is not one is left out of the options.
func (c Config) Validate() (Options, []string) {
	var p []string
	bad := func(field, format string, args ...any) {
		p = append(p, field+": "+fmt.Sprintf(format, args...))
	}
	o := Options{Listen: c.Listen}
	switch o.Listen {
	case "":
		o.Listen = DefaultListen
	case "off":
		o.Listen = ""
	}
	if o.Listen != "" {
		if err := ListenRule.Check(o.Listen, c.Token != "" || c.TokenFile != ""); err != nil {
			p = append(p, err.Error())
		}
	}
	var err error
	if o.Token, err = listen.Token("ingest", c.Token, c.TokenFile); err != nil {
		p = append(p, err.Error())
	}
	o.MaxRequestBytes = positive(&p, "ingest.max_request_bytes", c.MaxRequestBytes, DefaultMaxRequestBytes)
	o.MaxMovementBytes = positive(&p, "ingest.max_movement_bytes", c.MaxMovementBytes, DefaultMaxMovementBytes)
	if o.MaxMovementBytes > o.MaxRequestBytes {
		bad("ingest.max_movement_bytes", "must not exceed ingest.max_request_bytes")
	}
	for _, h := range c.AllowedHosts {
		if h == "" || strings.ContainsAny(h, ":/ ") {
			bad("ingest.allowed_hosts", "%q is not a host name or IPv4 address (no scheme, no port)", h)
			continue
		}
		o.AllowedHosts = append(o.AllowedHosts, h)
	}
	for _, org := range c.AllowedOrigins {
		if u, err := url.Parse(org); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			bad("ingest.allowed_origins", "%q is not an origin such as https://pos.example", org)
			continue
		}
		o.AllowedOrigins = append(o.AllowedOrigins, strings.TrimSuffix(org, "/"))
	}
	return o, p
}

// positive is v, or def when v is zero; a negative v is a problem.
func positive(p *[]string, field string, v, def int64) int64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		*p = append(*p, fmt.Sprintf("%s: must be positive (got %v)", field, v))
	}
	return v
}
