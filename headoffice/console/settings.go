package console

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"github.com/rxedge/agent/internal/disk"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// MaxBulkSpread is the longest spread of a bulk redrive: the agents
// refuse a longer one (dlq.MaxSpread).
const MaxBulkSpread = 24 * time.Hour

// Settings are the console's section of hq's settings file, as YAML
// reads it; Options turns them into the server's Options.
//
//	console:
//	  listen: 127.0.0.1:7480
//	  auth: proxy                  # dev, client_cert or proxy
//	  tls: {cert_file: …, key_file: …, client_ca_file: …}
//	  proxy: {header: X-Forwarded-User, from: [10.0.0.5, 10.0.1.0/28]}
//	  roles:
//	    viewer: [pat@chain.example]
//	    operator: [olga@chain.example]
//	    auditor: [ines@chain.example]
//	  session_ttl: 8h
//	  bulk: {concurrency: 8, spread: 10m, max_stores: 5000}
type Settings struct {
	Listen string `yaml:"listen"`
	Auth   string `yaml:"auth"`
	TLS    struct {
		CertFile     string `yaml:"cert_file"`
		KeyFile      string `yaml:"key_file"`
		ClientCAFile string `yaml:"client_ca_file"`
	} `yaml:"tls"`
	Proxy struct {
		Header string   `yaml:"header"`
		From   []string `yaml:"from"`
	} `yaml:"proxy"`
	Roles struct {
		Viewer   []string `yaml:"viewer"`
		Operator []string `yaml:"operator"`
		Auditor  []string `yaml:"auditor"`
	} `yaml:"roles"`
	SessionTTL time.Duration `yaml:"session_ttl"`
	Bulk       struct {
		Concurrency int           `yaml:"concurrency"`
		Spread      time.Duration `yaml:"spread"`
		MaxStores   int           `yaml:"max_stores"`
	} `yaml:"bulk"`
}

// Options returns the options the settings give (hq adds the index, the
// client, the journal and the sources), or every problem at once, each
// naming its field under section. Files are read here; no problem
// quotes a file's content.
func (s Settings) Options(section string) (Options, error) {
	o := Options{Listen: s.Listen, Auth: s.Auth, ProxyHeader: s.Proxy.Header, SessionTTL: s.SessionTTL,
		BulkConcurrency: s.Bulk.Concurrency, BulkSpread: s.Bulk.Spread, MaxBulkStores: s.Bulk.MaxStores}
	var bad []string
	add := func(field, format string, args ...any) {
		bad = append(bad, section+"."+field+": "+fmt.Sprintf(format, args...))
	}
	if s.TLS.CertFile != "" || s.TLS.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(s.TLS.CertFile, s.TLS.KeyFile)
		if err != nil {
			add("tls", "the certificate and key do not load: %v", err)
		} else {
			o.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		}
	}
	if s.TLS.ClientCAFile != "" {
		pool, err := loadCA(s.TLS.ClientCAFile)
		switch {
		case err != nil:
			add("tls.client_ca_file", "%v", err)
		case o.TLS == nil:
			add("tls.client_ca_file", "needs tls.cert_file and tls.key_file: client certificates are asked over TLS")
		default:
			o.TLS.ClientCAs = pool
		}
	}
	for _, f := range s.Proxy.From {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				add("proxy.from", "%q is not an address or a CIDR prefix", f)
				continue
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		o.ProxyFrom = append(o.ProxyFrom, p.Masked())
	}
	o.Roles = map[string][]string{}
	for role, ids := range map[string][]string{RoleViewer: s.Roles.Viewer, RoleOperator: s.Roles.Operator, RoleAuditor: s.Roles.Auditor} {
		for _, id := range ids {
			if !slices.Contains(o.Roles[id], role) {
				o.Roles[id] = append(o.Roles[id], role)
				slices.Sort(o.Roles[id])
			}
		}
	}
	switch {
	case s.Bulk.Spread < 0 || s.Bulk.Spread > MaxBulkSpread:
		add("bulk.spread", "%s is not between 0 and %s", s.Bulk.Spread, MaxBulkSpread)
	case s.Bulk.Concurrency < 0 || s.Bulk.Concurrency > 256:
		add("bulk.concurrency", "%d is not between 1 and 256", s.Bulk.Concurrency)
	case s.Bulk.MaxStores < 0:
		add("bulk.max_stores", "must not be negative")
	}
	if len(bad) > 0 {
		return o, errors.New(strings.Join(bad, "\n"))
	}
	return o, nil
}

// loadCA reads a PEM file of CA certificates.
func loadCA(path string) (*x509.CertPool, error) {
	b, err := disk.ReadRegular(path, 1<<20)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}
