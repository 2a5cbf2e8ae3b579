package deptest

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// A build is one way a binary is built: for an operating system, with
// build tags. Each binary rule is checked in every build it applies to.
type build struct {
	goos string
	tags string // comma-separated; "" for a default build
}

func (b build) String() string {
	if b.tags == "" {
		return "GOOS=" + b.goos
	}
	return "GOOS=" + b.goos + " -tags " + b.tags
}

// noDev is the tag the packages build the store's agent with: no
// embedded development hub, so no NATS server (cmd/agent/devhub_nodev.go).
const noDev = "rxedge_nodev"

// builds are the builds the binary rules are checked in: the systems the
// product ships for, with and without the production tag.
var builds = []build{{"linux", ""}, {"windows", ""}, {"linux", noDev}, {"windows", noDev}}

func production(b build) bool { return slices.Contains(strings.Split(b.tags, ","), noDev) }

// A binaryRule keeps what a binary links (its main package and every
// package it depends on, as `go list -deps` lists them for a build) from
// holding the packages forbidden matches, in the manner of Tailscale's
// cmd/tailscaled/deps_test.go. With via, a forbidden package may be
// linked, but only through one of via's packages: the import chains from
// the main package that reach it all pass through one.
type binaryRule struct {
	binary    string            // the main package, below the module
	when      func(build) bool  // the builds the rule applies to; nil: all
	forbidden func(string) bool // what the binary must not link
	via       func(string) bool // nil, or the only way in
	why       string
}

// binaryRules are the rules of the two binaries (DESIGN §8): the store's
// agent links nothing of head office, no PostgreSQL driver, and a NATS
// server only for `run --dev` (which the production build does not have);
// head office's hq links no store file format and no store package.
var binaryRules = []binaryRule{
	{binary: "cmd/agent", forbidden: anyOf(headOffice, under("github.com/jackc/pgx")),
		why: "the store's binary carries no head-office tool and no PostgreSQL driver: those are rxedge-hq's"},
	{binary: "cmd/agent", forbidden: under(natsServer), via: under(module + "/hub"),
		why: "the store's binary links a NATS server only for run --dev's embedded hub"},
	{binary: "cmd/agent", when: production, forbidden: under(module + "/hub"),
		why: "the production build (tag " + noDev + ", as the packages build it) has no development hub, so no NATS server"},
	{binary: "cmd/hq", when: func(b build) bool { return !production(b) }, forbidden: anyOf(under("go.etcd.io/bbolt"), under(module+"/queue"), under(module+"/sync"),
		under(module+"/daemon"), under(module+"/control"), under(module+"/intake")),
		why: "head office's binary reads central, never a store's data file, and runs no part of a store"},
}

// TestBinaries checks binaryRules against what each binary links in each
// build.
func TestBinaries(t *testing.T) {
	graphs := map[string][]pkg{}
	for _, r := range binaryRules {
		for _, b := range builds {
			if r.when != nil && !r.when(b) {
				continue
			}
			key := r.binary + " " + b.String()
			if graphs[key] == nil {
				graphs[key] = listBinary(t, r.binary, b)
			}
		}
	}
	for _, v := range binaryViolations(binaryRules, builds, func(binary string, b build) []pkg { return graphs[binary+" "+b.String()] }) {
		t.Error(v)
	}
}

// listBinary is `go list -deps` of the binary's main package in build b.
func listBinary(t *testing.T, binary string, b build) []pkg {
	t.Helper()
	args := []string{"list", "-deps", "-json"}
	if b.tags != "" {
		args = append(args, "-tags", b.tags)
	}
	cmd := exec.Command("go", append(args, module+"/"+binary)...)
	cmd.Env = append(os.Environ(), "GOOS="+b.goos, "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s (%s): %v", binary, b, err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// binaryViolations describes, for each rule and build it applies to, each
// forbidden package the binary links, with an import chain from the main
// package that reaches it (not through via). A rule whose binary has no
// packages in a build is reported too, so a rename cannot switch it off.
func binaryViolations(rules []binaryRule, builds []build, graph func(binary string, b build) []pkg) []string {
	var out []string
	for _, r := range rules {
		for _, b := range builds {
			if r.when != nil && !r.when(b) {
				continue
			}
			pkgs := graph(r.binary, b)
			if len(pkgs) == 0 {
				out = append(out, fmt.Sprintf("%s (%s): no such binary, but a rule names it", r.binary, b))
				continue
			}
			for _, chain := range forbiddenChains(pkgs, module+"/"+r.binary, r.forbidden, r.via) {
				out = append(out, fmt.Sprintf("%s (%s) links %s (%s): %s",
					r.binary, b, chain[len(chain)-1], strings.Join(chain, " -> "), r.why))
			}
		}
	}
	return out
}

// forbiddenChains walks the import graph from root, not entering via's
// packages, and returns for each forbidden package it reaches the
// shortest import chain that reaches it, in the order found.
func forbiddenChains(pkgs []pkg, root string, forbidden, via func(string) bool) [][]string {
	byPath := make(map[string]pkg, len(pkgs))
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	from := map[string]string{root: ""}
	queue := []string{root}
	var out [][]string
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if forbidden(p) {
			var chain []string
			for q := p; q != ""; q = from[q] {
				chain = append([]string{q}, chain...)
			}
			out = append(out, chain)
			continue // what lies below it is its own
		}
		for _, i := range byPath[p].Imports {
			if _, seen := from[i]; seen || (via != nil && via(i)) {
				continue
			}
			from[i] = p
			queue = append(queue, i)
		}
	}
	return out
}

// TestBinariesCatchViolations runs binaryRules over made-up builds of the
// two binaries in which each rule is broken, beside near misses that keep
// them: a store package that imports the sink (and so pgx), the server
// linked beside the hub, the hub in a production build, and hq linking dlq
// (and so queue and bbolt).
func TestBinariesCatchViolations(t *testing.T) {
	m := func(s string) string { return module + "/" + s }
	p := func(path string, imports ...string) pkg { return pkg{ImportPath: path, Imports: imports} }
	agent := []pkg{
		p(m("cmd/agent"), m("doctor"), m("hub"), m("internal/cli")),
		p(m("doctor"), m("headoffice/sink"), m("sync")),
		p(m("headoffice/sink"), "github.com/jackc/pgx/v5"),
		p("github.com/jackc/pgx/v5"),
		p(m("sync"), natsServer+"/v2/server"),
		p(m("hub"), natsServer+"/v2/server", m("central")),
		p(natsServer + "/v2/server"),
		p(m("central")),
		p(m("internal/cli")),
	}
	agentNoDev := []pkg{p(m("cmd/agent"), m("hub")), p(m("hub"), natsServer+"/v2/server"), p(natsServer + "/v2/server")}
	hq := []pkg{
		p(m("cmd/hq"), m("headoffice/fleet"), m("status"), m("internal/cli")),
		p(m("headoffice/fleet"), m("dlq")),
		p(m("dlq"), m("queue")),
		p(m("queue"), "go.etcd.io/bbolt"),
		p("go.etcd.io/bbolt"),
		p(m("status")),
		p(m("internal/cli")),
	}
	linux, linuxNoDev := build{"linux", ""}, build{"linux", noDev}
	graph := func(binary string, b build) []pkg {
		switch {
		case binary == "cmd/agent" && b == linux:
			return agent
		case binary == "cmd/agent" && b == linuxNoDev:
			return agentNoDev
		case binary == "cmd/hq" && b == linux:
			return hq
		}
		return nil
	}
	got := binaryViolations(binaryRules, []build{linux, linuxNoDev}, graph)
	want := []string{
		"cmd/agent (GOOS=linux) links " + m("headoffice/sink") + " (" + m("cmd/agent") + " -> " + m("doctor") + " -> " + m("headoffice/sink") + "): ",
		"cmd/agent (GOOS=linux) links " + natsServer + "/v2/server (" + m("cmd/agent") + " -> " + m("doctor") + " -> " + m("sync") + " -> " + natsServer + "/v2/server): ",
		"cmd/agent (GOOS=linux -tags rxedge_nodev) links " + m("hub") + " (" + m("cmd/agent") + " -> " + m("hub") + "): ",
		"cmd/hq (GOOS=linux) links " + m("queue") + " (" + m("cmd/hq") + " -> " + m("headoffice/fleet") + " -> " + m("dlq") + " -> " + m("queue") + "): ",
	}
	if len(got) != len(want) {
		t.Fatalf("violations:\n%s\nwant %d starting:\n%s", strings.Join(got, "\n"), len(want), strings.Join(want, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("violation %q, want it to start %q", got[i], want[i])
		}
	}
	if got := binaryViolations(binaryRules[:1], []build{{"plan9", ""}}, graph); len(got) != 1 || !strings.Contains(got[0], "no such binary") {
		t.Errorf("a rule whose binary is missing: %q", got)
	}
}
