package deptest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

const natsServer = "github.com/nats-io/nats-server"

// badDeps lists, per package, import paths that must never appear among
// its dependencies (direct or not), in the manner of Tailscale's deptest
// BadDeps. An entry matches that path and every path below it; why says
// the reason. Every client package of central is here with natsServer.
var badDeps = map[string][]string{
	"sync":     {module + "/daemon", module + "/control", natsServer},
	"queue":    {module + "/daemon", module + "/control", natsServer},
	"retry":    {module + "/daemon", module + "/control", natsServer},
	"dlq":      {module + "/daemon", module + "/control", "net/http", natsServer},
	"status":   {module + "/daemon", module + "/control", "net/http", natsServer},
	"remote":   {natsServer},
	"movement": {natsServer},
	"control":  {natsServer},
	"metrics":  {natsServer},
	"settings": {natsServer},
	"central":  {module, natsServer},
	// The intakes hand movements to the queue; they know nothing of the
	// local API or of central.
	"intake":      {module + "/daemon", module + "/control", "net/http", natsServer},
	"intake/hl7":  {module + "/daemon", module + "/control", "net/http", natsServer},
	"intake/asap": {module + "/daemon", module + "/control", "net/http", natsServer},
	// The sink checks a payload with the movement model (head office
	// refuses what a store would), and links nothing else of the store.
	"headoffice/sink": {module + "/queue", module + "/sync", module + "/daemon",
		module + "/control", module + "/settings", "go.etcd.io/bbolt", natsServer},
}

var why = map[string]string{
	module + "/daemon":   "it is above it",
	module + "/control":  "it is above it: the local API calls the domain packages, not the other way round",
	"net/http":           "a domain package knows nothing of HTTP: its routes are in package control",
	natsServer:           "a client of central never links the server; the wire contract it needs is in central",
	module:               "central is the contract both sides import, so it imports nothing of ours",
	module + "/queue":    "head office reads central's archives, never a store's queue",
	module + "/sync":     "head office links nothing of the store side",
	module + "/settings": "head office links nothing of the store side",
	"go.etcd.io/bbolt":   "head office links no store file format",
}

// TestBadDeps checks badDeps against the module's packages.
func TestBadDeps(t *testing.T) {
	for _, v := range badDepViolations(list(t), badDeps) {
		t.Error(v)
	}
}

// badDepViolations describes, per package and forbidden path, what rules
// forbid: how many packages match and through which of the package's own
// imports they come. It also reports every package rules names that is
// not in pkgs, so a rename cannot switch a rule off.
func badDepViolations(pkgs []pkg, rules map[string][]string) []string {
	byPath := make(map[string]pkg, len(pkgs))
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	var out []string
	for _, short := range slices.Sorted(maps.Keys(rules)) {
		p, ok := byPath[module+"/"+short]
		if !ok {
			out = append(out, fmt.Sprintf("%s: no such package in the module, but a BadDeps rule names it", short))
			continue
		}
		for _, bad := range rules[short] {
			matches := func(d string) bool { return d == bad || strings.HasPrefix(d, bad+"/") }
			n := 0
			for _, d := range p.Deps {
				if matches(d) {
					n++
				}
			}
			if n == 0 {
				continue
			}
			var via []string
			for _, i := range p.Imports {
				if matches(i) || slices.ContainsFunc(byPath[i].Deps, matches) {
					via = append(via, i)
				}
			}
			if len(via) == 0 {
				via = []string{"a package outside the module"}
			}
			out = append(out, fmt.Sprintf("%s depends on %s (%d package(s), through %s): %s",
				short, bad, n, strings.Join(via, ", "), why[bad]))
		}
	}
	return out
}

// TestBadDepsCatchViolations runs badDeps over a made-up module in which
// three rules are broken and one package is missing, beside near misses
// that are not violations.
func TestBadDepsCatchViolations(t *testing.T) {
	hub := pkg{ImportPath: module + "/hub", Deps: []string{natsServer + "/v2/conf", natsServer + "/v2/server"}}
	pkgs := []pkg{hub}
	for short := range badDeps {
		p := pkg{ImportPath: module + "/" + short,
			Deps: []string{"fmt", "github.com/nats-io/nats.go", "github.com/nats-io/nats-serverless", module + "/controlled"}}
		switch short {
		case "sync":
			p.Imports = []string{"fmt", hub.ImportPath}
			p.Deps = append(append(p.Deps, hub.ImportPath), hub.Deps...)
		case "central":
			p.Imports = []string{module + "/retry"}
			p.Deps = []string{module + "/retry"}
		case "dlq":
			p.Imports = []string{"net/http"}
			p.Deps = append(p.Deps, "net/http")
		case "settings":
			continue // as if renamed
		}
		pkgs = append(pkgs, p)
	}
	got := badDepViolations(pkgs, badDeps)
	want := []string{
		"central depends on " + module + " (1 package(s), through " + module + "/retry): ",
		"dlq depends on net/http (1 package(s), through net/http): ",
		"settings: no such package",
		"sync depends on " + natsServer + " (2 package(s), through " + module + "/hub): ",
	}
	if len(got) != len(want) {
		t.Fatalf("violations %q, want %d starting %q", got, len(want), want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("violation %q, want it to start %q", got[i], want[i])
		}
	}
}
