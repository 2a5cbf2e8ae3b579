package deptest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// A side rule keeps one group of the module's packages from linking what
// belongs to another (DESIGN §8): the store's agent never carries head
// office's tools or a server, head office's tools never carry the store's
// bbolt queue, and no product code carries a test rig.
type sideRule struct {
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

var sideRules = []sideRule{
	{"head office", headOffice, anyOf(under(module+"/queue"), under("go.etcd.io/bbolt")),
		"head office reads central, never a store's data file: the bbolt queue is the store's"},
	{"store", store, anyOf(headOffice, under(module+"/hub"), under(natsServer)),
		"the store's agent links no head-office tool and no server: it reaches central only through the contract in central/"},
	{"contract", contract, func(d string) bool { return ours(d) && !contract(d) },
		"central/ is the contract both sides import, so it imports nothing else of ours"},
	{"product", func(p string) bool { return ours(p) && !testKit(p) && !under(module+"/cmd/bench")(p) }, testKit,
		"the test rigs stay out of what ships (the bench, which does not ship, may start a real PostgreSQL with one)"},
}

// TestSidesApart checks sideRules against the module's packages.
func TestSidesApart(t *testing.T) {
	for _, v := range sideViolations(list(t), sideRules) {
		t.Error(v)
	}
}

// sideViolations describes each package that breaks a rule: which
// forbidden packages it depends on, through which of its own imports. A
// rule that binds no package is reported too, so a move cannot switch it
// off.
func sideViolations(pkgs []pkg, rules []sideRule) []string {
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

// TestSidesApartCatchViolations runs sideRules over a made-up module in
// which each rule is broken once, beside packages that keep them.
func TestSidesApartCatchViolations(t *testing.T) {
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
	}
	got := sideViolations(pkgs, sideRules)
	want := []string{
		"head office rule: " + m("headoffice/sink") + " depends on " + m("queue") + ", go.etcd.io/bbolt (through " + m("dlq") + ")",
		"store rule: " + m("doctor") + " depends on " + m("headoffice/fleet") + " (through " + m("headoffice/fleet") + ")",
		"store rule: " + m("intake") + " depends on " + m("hub") + ", " + natsServer + "/v2/server (through " + m("testkit/natstest") + ")",
		"contract rule: " + m("central/command") + " depends on " + m("status") + " (through " + m("status") + ")",
		"product rule: " + m("intake") + " depends on " + m("testkit/natstest") + " (through " + m("testkit/natstest") + ")",
	}
	if len(got) != len(want) {
		t.Fatalf("violations:\n%s\nwant %d starting:\n%s", strings.Join(got, "\n"), len(want), strings.Join(want, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("violation %q, want it to start %q", got[i], want[i])
		}
	}
	if got := sideViolations(pkgs[:1], sideRules[:1]); len(got) != 1 || !strings.Contains(got[0], "binds no package") {
		t.Errorf("a rule that binds nothing: %q", got)
	}
}
