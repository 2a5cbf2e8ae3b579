package intake

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/rxedge/agent/internal/listen"
)

// Options is the intake: section of the agent's configuration. Zero values
// mean the default; Validate fills them in.
type Options struct {
	HL7 HL7Options `yaml:"hl7"`
	// ASAP is the drop folder of ASAP 4.2 files.
	ASAP ASAPOptions `yaml:"asap"`
	// Formulary is a CSV file of ndc,schedule or ndc,schedule,unit
	// lines: the schedule of a dispense whose message does not give one,
	// the product a bare 10-digit NDC stands for, and the unit every
	// movement of an NDC must be in (LoadFormulary). Every intake reads
	// it, HTTP included.
	Formulary string `yaml:"formulary"`
}

// HL7Options configure the HL7 v2 MLLP listener.
type HL7Options struct {
	// Listen is host:port; "" (the default) or "off" means no listener.
	Listen string `yaml:"listen"`
	// AllowedHosts are the addresses (IP or CIDR) other than loopback
	// that may connect. Without them the listener must be on loopback.
	AllowedHosts []string `yaml:"allowed_hosts"`
	// CertFile and KeyFile make the listener speak TLS; CAFile then
	// requires client certificates signed by that CA.
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// MaxConnections bounds concurrent connections. Default 32.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerPeer bounds concurrent connections from one
	// address, so one sender cannot hold every connection. Default 8
	// (at most MaxConnections).
	MaxConnectionsPerPeer int `yaml:"max_connections_per_peer"`
	// MaxMessageBytes bounds one message. Default 1 MiB.
	MaxMessageBytes int `yaml:"max_message_bytes"`
	// IdleTimeout closes a connection that sends no message the agent
	// accepts for that long (a sender of refused frames is idle too).
	// Default 5m.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// WriteTimeout closes a connection that does not read its
	// acknowledgement. Default 10s.
	WriteTimeout time.Duration `yaml:"write_timeout"`

	// Allowed is AllowedHosts parsed (filled by Validate).
	Allowed []netip.Prefix `yaml:"-"`
}

// ASAPOptions configure the ASAP drop folder.
type ASAPOptions struct {
	// Dir is the drop folder; "" (the default) means none.
	Dir string `yaml:"dir"`
	// PollInterval is how often the folder is looked at. Default 2s.
	PollInterval time.Duration `yaml:"poll_interval"`
	// MaxFileBytes bounds one file. Default 64 MiB.
	MaxFileBytes int64 `yaml:"max_file_bytes"`
}

// Defaults.
const (
	DefaultMaxConnections  = 32
	DefaultMaxPerPeer      = 8
	DefaultMaxMessageBytes = 1 << 20
	DefaultIdleTimeout     = 5 * time.Minute
	DefaultWriteTimeout    = 10 * time.Second
	DefaultPollInterval    = 2 * time.Second
	DefaultMaxFileBytes    = 64 << 20
)

// Validate fills in defaults and returns every problem, each as
// "intake.<field>: what is wrong", for the configuration layer to report
// with its own.
func (o *Options) Validate() []string {
	var errs []string
	bad := func(field, format string, args ...any) {
		errs = append(errs, "intake."+field+": "+fmt.Sprintf(format, args...))
	}
	h := &o.HL7
	if h.Listen == "off" {
		h.Listen = ""
	}
	h.Allowed = nil
	for _, s := range h.AllowedHosts {
		p, err := parseHost(s)
		if err != nil {
			bad("hl7.allowed_hosts", "%q is not an IP address or CIDR prefix", s)
			continue
		}
		h.Allowed = append(h.Allowed, p)
	}
	if h.Listen != "" {
		rule := listen.Rule{Field: "intake.hl7.listen", Example: `127.0.0.1:2575, or "off"`,
			Guard: "also list the senders' addresses in intake.hl7.allowed_hosts"}
		if err := rule.Check(h.Listen, len(h.AllowedHosts) > 0); err != nil {
			errs = append(errs, err.Error())
		}
	} else if len(h.AllowedHosts) > 0 {
		bad("hl7.allowed_hosts", "is set but intake.hl7.listen is not")
	}
	if (h.CertFile == "") != (h.KeyFile == "") {
		bad("hl7.cert_file", "set both intake.hl7.cert_file and intake.hl7.key_file, or neither")
	}
	if h.CAFile != "" && h.CertFile == "" {
		bad("hl7.ca_file", "requires intake.hl7.cert_file and key_file (client certificates need TLS)")
	}
	h.MaxConnections = positive(&errs, "hl7.max_connections", h.MaxConnections, DefaultMaxConnections)
	h.MaxConnectionsPerPeer = min(positive(&errs, "hl7.max_connections_per_peer", h.MaxConnectionsPerPeer, DefaultMaxPerPeer), max(h.MaxConnections, 1))
	h.MaxMessageBytes = positive(&errs, "hl7.max_message_bytes", h.MaxMessageBytes, DefaultMaxMessageBytes)
	if h.MaxMessageBytes > 64<<20 {
		bad("hl7.max_message_bytes", "must be at most 64 MiB")
	}
	h.IdleTimeout = positive(&errs, "hl7.idle_timeout", h.IdleTimeout, DefaultIdleTimeout)
	h.WriteTimeout = positive(&errs, "hl7.write_timeout", h.WriteTimeout, DefaultWriteTimeout)

	a := &o.ASAP
	if a.Dir != "" {
		abs, err := filepath.Abs(a.Dir)
		if err != nil {
			bad("asap.dir", "%v", err)
		} else {
			a.Dir = abs
		}
	}
	if a.Dir != "" && o.Formulary == "" {
		bad("asap.dir", "needs intake.formulary: an ASAP record carries no DEA schedule, so each NDC's schedule comes from the formulary")
	}
	a.PollInterval = positive(&errs, "asap.poll_interval", a.PollInterval, DefaultPollInterval)
	a.MaxFileBytes = positive(&errs, "asap.max_file_bytes", a.MaxFileBytes, DefaultMaxFileBytes)
	if o.Formulary != "" {
		if _, err := LoadFormulary(o.Formulary); err != nil {
			bad("formulary", "%v", err)
		}
	}
	return errs
}

func parseHost(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// Permitted reports whether a peer at addr may connect: loopback always,
// others only when listed in AllowedHosts.
func (h *HL7Options) Permitted(addr net.Addr) bool {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap()
	if ip.IsLoopback() {
		return true
	}
	for _, p := range h.Allowed {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func positive[T int | int64 | time.Duration](errs *[]string, field string, v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		*errs = append(*errs, "intake."+field+": must be positive")
		return def
	}
	return v
}
