package deptest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// A rule keeps a group of the module's packages from depending on what
// they must not: the sides apart (the store's agent never carries head
// office's tools or a server, head office never the store's bbolt queue,
// no product code a test rig), and the layers in order (a domain package
// never the local API above it, nor HTTP; retry and movement nothing but
// the standard library). This table is the module's one statement of its
// dependency rules; what each binary links, build by build, is held by
// binaryRules (binaries_test.go), which needs the builds' tags.
type rule struct {
	name      string
	members   func(path string) bool // the packages the rule binds
	forbidden func(dep string) bool  // what they must not depend on
	why       string
}

func under(prefix string) func(string) bool {
	return func(p string) bool { return p == prefix || strings.HasPrefix(p, prefix+"/") }
}

func anyOf(fs ...func(string) bool) func(string) bool {
	return func(p string) bool { return slices.ContainsFunc(fs, func(f func(string) bool) bool { return f(p) }) }
}

var (
	headOffice = under(module + "/headoffice")
	testKit    = under(module + "/testkit")
	contract   = under(module + "/central")
	// store is every product package that runs at the store: all but the
	// contract, head office, the embedded server, the commands (what each
	// binary links is held by binaryRules), the test kit and this test.
	store = func(p string) bool {
		return ours(p) && !anyOf(contract, headOffice, testKit, under(module+"/hub"), under(module+"/cmd"), under(module+"/internal/deptest"))(p)
	}
)

var rules = []rule{
	{"head office", headOffice, anyOf(under(module+"/queue"), under("go.etcd.io/bbolt")),
		"head office reads central, never a store's data file: the bbolt queue is the store's"},
	{"sink", under(module + "/headoffice/sink"), anyOf(under(module+"/sync"), under(module+"/settings"), control, daemon),
		"the sink checks a payload with the movement model (head office refuses what a store would) and links nothing else of the store"},
	{"store", store, anyOf(headOffice, under(module+"/hub"), under(natsServer)),
		"the store's agent links no head-office tool and no server: it reaches central only through the contract in central/"},
	{"contract", contract, func(d string) bool { return ours(d) && !contract(d) || under(natsServer)(d) },
		"central/ is the contract both sides import, so it imports nothing else of ours, and no server"},
	{"product", func(p string) bool { return ours(p) && !testKit(p) && !under(module+"/cmd/bench")(p) }, testKit,
		"the test rigs stay out of what ships (the bench, which does not ship, may start a real PostgreSQL with one)"},
	{"commands", func(p string) bool { return ours(p) && !under(module+"/cmd")(p) }, under(module + "/cmd"),
		"nothing imports a command: a command is flags and a call into a package"},
	{"below the local API", oneOf("sync", "queue", "retry", "dlq", "status", "settings", "intake", "intake/hl7", "intake/asap"), anyOf(control, daemon),
		"the local API (control) and the daemon call the domain packages, not the other way round; settings takes its defaults from the leaf control/ingest"},
	{"no HTTP in the domain", oneOf("dlq", "status", "intake", "intake/hl7", "intake/asap"), under("net/http"),
		"a domain package knows nothing of HTTP: its routes are in package control"},
	{"leaves", oneOf("retry", "movement"), func(d string) bool { return !std(d) },
		"retry and movement are the standard library only"},
	{"queue", oneOf("queue"), func(d string) bool {
		return !std(d) && !anyOf(under(module+"/movement"), under(module+"/internal/disk"), under(module+"/central/ledger"),
			under("golang.org/x/mod/sumdb"), under("go.etcd.io/bbolt"), under("golang.org/x/sys"))(d)
	}, "queue is bbolt, the movement model, the disk helpers and the ledger contract (a leaf) with the tree and note code it uses"},
}

var (
	control = func(p string) bool { return under(module+"/control")(p) && p != module+"/control/ingest" }
	daemon  = under(module + "/daemon")
)

// oneOf binds the packages named, each alone (not the packages under it).
func oneOf(short ...string) func(string) bool {
	return func(p string) bool {
		rest, ok := strings.CutPrefix(p, module+"/")
		return ok && slices.Contains(short, rest)
	}
}

// TestRules checks rules against the module's packages.
func TestRules(t *testing.T) {
	for _, v := range violations(list(t), rules) {
		t.Error(v)
	}
}

// violations describes each package that breaks a rule: which
// forbidden packages it depends on, through which of its own imports. A
// rule that binds no package is reported too, so a move cannot switch it
// off.
func violations(pkgs []pkg, rules []rule) []string {
	byPath := make(map[string]pkg, len(pkgs))
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	var out []string
	for _, r := range rules {
		bound := 0
		for _, p := range pkgs {
			if !r.members(p.ImportPath) {
				continue
			}
			bound++
			var bad []string
			for _, d := range p.Deps {
				if r.forbidden(d) {
					bad = append(bad, d)
				}
			}
			if len(bad) == 0 {
				continue
			}
			var via []string
			for _, i := range p.Imports {
				if r.forbidden(i) || slices.ContainsFunc(byPath[i].Deps, r.forbidden) {
					via = append(via, i)
				}
			}
			out = append(out, fmt.Sprintf("%s rule: %s depends on %s (through %s): %s",
				r.name, p.ImportPath, strings.Join(bad, ", "), strings.Join(via, ", "), r.why))
		}
		if bound == 0 {
			out = append(out, fmt.Sprintf("%s rule: binds no package of the module", r.name))
		}
	}
	return out
}

// TestRulesCatchViolations runs rules over a made-up module in which
// rules are broken, beside packages that keep them.
func TestRulesCatchViolations(t *testing.T) {
	m := func(s string) string { return module + "/" + s }
	pkgs := []pkg{
		{ImportPath: m("queue"), Deps: []string{"go.etcd.io/bbolt"}},
		{ImportPath: m("central"), Deps: []string{"github.com/nats-io/nats.go"}},
		{ImportPath: m("central/command"), Imports: []string{m("central"), m("status")}, Deps: []string{m("central"), m("status")}},
		{ImportPath: m("status")},
		{ImportPath: m("headoffice/fleet"), Imports: []string{m("central/command")}, Deps: []string{m("central"), m("central/command"), m("status")}},
		{ImportPath: m("headoffice/sink"), Imports: []string{m("dlq")}, Deps: []string{m("dlq"), m("queue"), "go.etcd.io/bbolt"}},
		{ImportPath: m("dlq"), Imports: []string{m("queue")}, Deps: []string{m("queue"), "go.etcd.io/bbolt"}},
		{ImportPath: m("doctor"), Imports: []string{m("headoffice/fleet")}, Deps: []string{m("headoffice/fleet"), m("central"), m("central/command"), m("status")}},
		{ImportPath: m("intake"), Imports: []string{m("testkit/natstest")}, Deps: []string{m("testkit/natstest"), m("hub"), natsServer + "/v2/server"}},
		{ImportPath: m("testkit/natstest"), Imports: []string{m("hub")}, Deps: []string{m("hub"), natsServer + "/v2/server"}},
		{ImportPath: m("hub"), Deps: []string{natsServer + "/v2/server"}},
		{ImportPath: m("cmd/agent"), Imports: []string{m("hub"), m("headoffice/fleet"), m("dlq")}, Deps: []string{m("hub"), m("headoffice/fleet"), m("dlq"), m("queue")}},
		{ImportPath: m("retry"), Imports: []string{"github.com/google/uuid"}, Deps: []string{"github.com/google/uuid", "fmt"}},
		{ImportPath: m("status"), Imports: []string{m("control")}, Deps: []string{m("control"), "net/http"}},
		{ImportPath: m("control"), Deps: []string{"net/http"}},
		{ImportPath: m("settings"), Imports: []string{m("control/ingest")}, Deps: []string{m("control/ingest")}},
		{ImportPath: m("control/ingest")},
	}
	var got []string
	for _, v := range violations(pkgs, rules) {
		if !strings.Contains(v, "binds no package") { // the made-up module is small
			got = append(got, v)
		}
	}
	want := []string{
		"head office rule: " + m("headoffice/sink") + " depends on " + m("queue") + ", go.etcd.io/bbolt (through " + m("dlq") + ")",
		"store rule: " + m("doctor") + " depends on " + m("headoffice/fleet") + " (through " + m("headoffice/fleet") + ")",
		"store rule: " + m("intake") + " depends on " + m("hub") + ", " + natsServer + "/v2/server (through " + m("testkit/natstest") + ")",
		"contract rule: " + m("central/command") + " depends on " + m("status") + " (through " + m("status") + ")",
		"product rule: " + m("intake") + " depends on " + m("testkit/natstest") + " (through " + m("testkit/natstest") + ")",
		"below the local API rule: " + m("status") + " depends on " + m("control") + " (through " + m("control") + ")",
		"no HTTP in the domain rule: " + m("status") + " depends on net/http (through " + m("control") + ")",
		"leaves rule: " + m("retry") + " depends on github.com/google/uuid (through github.com/google/uuid)",
	}
	if len(got) != len(want) {
		t.Fatalf("violations:\n%s\nwant %d starting:\n%s", strings.Join(got, "\n"), len(want), strings.Join(want, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("violation %q, want it to start %q", got[i], want[i])
		}
	}
	if got := violations(pkgs[:1], rules[:1]); len(got) != 1 || !strings.Contains(got[0], "binds no package") {
		t.Errorf("a rule that binds nothing: %q", got)
	}
}
