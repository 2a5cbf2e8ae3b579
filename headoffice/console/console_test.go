package console_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/headoffice/console"

	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/testkit/agentbin"
	"github.com/rxedge/agent/testkit/ledgertest"
	"github.com/rxedge/agent/testkit/natstest"
)

// centralLimit is central's payload limit while the quarantine is made:
// above what the agents send but a large movement.
const centralLimit = 1024

// fixedFindings stand in for hq's PostgreSQL, which the console reads
// through its interface.
type fixedFindings []console.Finding

func (f fixedFindings) Findings(_ context.Context, q console.FindingQuery) ([]console.Finding, error) {
	var out []console.Finding
	for _, x := range f {
		if q.Store == "" || x.Store == q.Store {
			out = append(out, x)
		}
	}
	return out, nil
}

func (f fixedFindings) CountByStore(_ context.Context, stores []string) (map[string]int, error) {
	out := map[string]int{}
	for _, x := range f {
		out[x.Store]++
	}
	return out, nil
}

// chain is central, four stores' agents (one of them stopped, one never
// started) and hq's console over them.
type chain struct {
	hub      *natstest.Server
	op       *command.Signer
	intake   *agentProc // S0042: HL7 and ASAP intakes, patient markers in every patient field
	quar     *agentProc // S0001: a movement larger than central takes
	h        *hqConsole
	quarKey  string
	asapDir  string
	hl7Addr  string
	readPage []string
}

var roster = []fleet.RosterStore{
	{Store: "S0042", Region: "north", Tags: []string{"24h"}},
	{Store: "S0001", Region: "south"},
	{Store: "S0002", Region: "south", Tags: []string{"drive-thru"}},
	{Store: "S0003", Region: "west"},
}

// startChain starts central with a low payload limit, the agents and
// the console; S0001 quarantines its large movement and S0002 stops.
func startChain(t *testing.T) *chain {
	t.Helper()
	c := &chain{hub: natstest.StartHub(t, natstest.WithMaxPayload(centralLimit)), op: ledgertest.OperatorSigner(t)}
	dir := t.TempDir()
	form := filepath.Join(dir, "formulary.csv")
	os.WriteFile(form, []byte("ndc,schedule\n00406-0552-62,CII\n00054-0237-25,CII\n0591-0384-01,CIV\n"), 0o600)
	c.asapDir, c.hl7Addr = filepath.Join(dir, "asap"), freeAddr(t)
	c.intake = startAgent(t, c.hub, "S0042", c.op, "intake:\n  formulary: "+form+"\n  asap:\n    poll_interval: 100ms\n",
		"--hl7-listen", c.hl7Addr, "--asap-dir", c.asapDir)
	c.quar = startAgent(t, c.hub, "S0001", c.op, "")
	stopped := startAgent(t, c.hub, "S0002", c.op, "")
	c.h = startConsole(t, c.hub, c.op, roster, func(o *console.Options) {
		o.Findings = fixedFindings{{Source: "verification", Kind: "rewritten", Store: "S0002", Log: "0190a4b2", From: 12, To: 12, At: time.Now(), Detail: "the archive's record at sequence 12 differs from the leaf the store signed"}}
		book := fleet.NewProblemBook()
		book.Open("quarantine", "S0001", "1 movement(s) quarantined", time.Now())
		book.Open("offline", "S0002", "not seen for 3s", time.Now())
		book.Close("offline", "S0002", time.Now())
		o.Problems = console.BookProblems{Book: book}
	})
	waitFor(t, "S0002 in the fleet view", func() bool { r, _ := c.h.index.Get("S0002"); return r.Summary != nil })
	stopped.kill()

	c.quar.post(t, movementJSON("BIG-1", `,"note":"`+strings.Repeat("x", 1000)+`"`))
	waitFor(t, "S0001 to report its quarantine", func() bool {
		return c.h.index.Query(fleet.Query{State: fleet.CondQuarantining}).Matched == 1
	})
	c.sendIntakes(t)
	return c
}

// sendIntakes sends S0042 an HL7 dispense and two ASAP files, each with
// a patient marker in every patient field, and waits until they are
// delivered.
func (c *chain) sendIntakes(t *testing.T) {
	t.Helper()
	if ack := sendHL7(t, c.hl7Addr, rdsMessage("P1", "RXP1")); !strings.Contains(ack, "MSA|AA") {
		t.Fatalf("HL7 ACK %q, want AA", ack)
	}
	for _, s := range []string{"sample-4.2A.asap", "sample-4.2B.asap"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "intake", "asap", "testdata", s))
		if err != nil || !strings.Contains(string(b), patientMarker) {
			t.Fatalf("%s: %v, or it carries no marker", s, err)
		}
		os.WriteFile(filepath.Join(c.asapDir, s+".tmp"), b, 0o600)
		os.Rename(filepath.Join(c.asapDir, s+".tmp"), filepath.Join(c.asapDir, s))
	}
	waitFor(t, "S0042 to deliver the HL7 and ASAP movements", func() bool {
		r, _ := c.h.index.Get("S0042")
		return r.Summary != nil && r.Summary.SyncedTotal >= 5 && r.Summary.Pending == 0
	})
}

func freeAddr(t *testing.T) string { return agentbin.FreeAddr(t) }

// TestConsoleInABrowser drives the console in headless chromium against
// a real nats-server and the built agent: the fleet page lists the
// stores in their states; a store whose movement central refused as too
// large shows it in its quarantine; a viewer's redrive is refused and
// journalled; a post without the CSRF token is refused; once central
// takes larger messages an operator redrives the movement and the store
// page shows it delivered, the store's journal naming the operator; no
// page carries a patient marker from the HL7 and ASAP intakes. Each
// page's screenshot is kept (RXEDGE_CONSOLE_SCREENSHOTS).
func TestConsoleInABrowser(t *testing.T) {
	chromium(t)
	c := startChain(t)
	alice := newBrowser(t, "alice@chain.example")
	victor := newBrowser(t, "victor@chain.example")
	pages := map[string]string{}

	c.fleetShowsStates(t, alice, pages)
	c.storeShowsQuarantine(t, alice, pages)
	c.viewerIsRefused(t, victor, pages)
	c.tokenIsRequired(t, alice, pages)
	c.otherPages(t, alice, pages)
	c.hub.RestartWith(t, natstest.WithMaxPayload(1<<20))
	c.operatorRedrives(t, alice, pages)
	c.noPatientData(t, pages)
}

// rowStates is the fleet table as store → "state quarantined".
const rowStates = `Object.fromEntries([...document.querySelectorAll('#fleet tbody tr')].map(r => [r.dataset.store, r.dataset.state + ' ' + r.querySelector('.quarantined').textContent.trim()]))`

func (c *chain) fleetShowsStates(t *testing.T, b *browser, pages map[string]string) {
	t.Helper()
	waitFor(t, "S0002 to be judged stale", func() bool { r, _ := c.h.index.Get("S0002"); return r.State == fleet.Stale })
	b.open(c.h.url+"/fleet", "#fleet")
	got := eval[map[string]string](b, "read the fleet table", rowStates)
	want := map[string]string{"S0001": "needs_attention 1", "S0002": "stale 0", "S0003": "missing —", "S0042": "ok 0"}
	for store, w := range want {
		if got[store] != w {
			t.Errorf("fleet page: %s is %q, want %q (all: %v)", store, got[store], w, got)
		}
	}
	if order := eval[[]string](b, "read the order", `[...document.querySelectorAll('#fleet tbody tr')].map(r => r.dataset.store)`); len(order) != 4 || order[0] != "S0003" || order[3] != "S0042" {
		t.Errorf("fleet order %v: want problems first (missing S0003 first, healthy S0042 last)", order)
	}
	b.screenshot("fleet")
	pages["fleet"] = b.html()
	b.open(c.h.url+"/fleet?state=quarantining", "#fleet")
	if got := eval[map[string]string](b, "read the filtered table", rowStates); len(got) != 1 || got["S0001"] == "" {
		t.Errorf("filtered by quarantining: %v, want S0001 only", got)
	}
	b.open(c.h.url+"/fleet?region=south&sort=store", "#fleet")
	if got := eval[map[string]string](b, "read the region's table", rowStates); len(got) != 2 || got["S0001"] == "" || got["S0002"] == "" {
		t.Errorf("filtered by region south: %v, want S0001 and S0002", got)
	}
	pages["fleet filtered"] = b.html()
}

func (c *chain) storeShowsQuarantine(t *testing.T, b *browser, pages map[string]string) {
	t.Helper()
	b.open(c.h.url+"/stores/S0001", "#quarantine")
	c.quarKey = eval[string](b, "read the quarantined key", `document.querySelector('#quarantine tbody tr').dataset.key`)
	if reason := b.text("#quarantine tbody tr .reason"); reason != "permanent:too_large" || len(c.quarKey) != 32 {
		t.Errorf("store page: key %q quarantined for %q, want a key quarantined for permanent:too_large", c.quarKey, reason)
	}
	b.screenshot("store-quarantine")
	pages["store S0001"] = b.html()
	b.open(c.h.url+"/stores/S0042", "h2") // central's low limit refuses its status reply until raised
	b.screenshot("store")
	pages["store S0042"] = b.html()
}

func (c *chain) viewerIsRefused(t *testing.T, b *browser, pages map[string]string) {
	t.Helper()
	b.open(c.h.url+"/stores/S0001", "#quarantine")
	if n := eval[int](b, "count the checkboxes", `document.querySelectorAll('input[name=key]').length`); n != 0 {
		t.Errorf("a viewer's store page has %d redrive checkboxes, want none", n)
	}
	b.do("post a redrive as the viewer", discard(chromedp.Evaluate[bool](submitJS("/stores/S0001/redrive", map[string]string{"key": c.quarKey, "reason": "viewer tries"}, true))),
		chromedp.WaitReady(chromedp.CSS("#message")))
	if msg := b.text("#message"); !strings.Contains(msg, "does not allow") {
		t.Errorf("the viewer's redrive: %q, want refused for the role", msg)
	}
	b.screenshot("viewer-refused")
	pages["viewer refused"] = b.html()
	var refused bool
	for _, e := range journal(t, c.h) {
		refused = refused || (e.User == "victor@chain.example" && e.Outcome == console.ActionRefused && e.Action == "redrive")
	}
	if !refused {
		t.Errorf("the viewer's refused redrive is not in hq's journal: %+v", journal(t, c.h))
	}
}

func (c *chain) tokenIsRequired(t *testing.T, b *browser, pages map[string]string) {
	t.Helper()
	b.open(c.h.url+"/stores/S0001", "#quarantine")
	fields := map[string]string{"key": c.quarKey, "reason": "no token"}
	b.do("post a redrive without the token", discard(chromedp.Evaluate[bool](submitJS("/stores/S0001/redrive", fields, false))),
		chromedp.WaitReady(chromedp.CSS("#message")))
	if msg := b.text("#message"); !strings.Contains(msg, "token is missing") {
		t.Errorf("a redrive without the CSRF token: %q, want refused for the token", msg)
	}
	b.screenshot("no-token-refused")
	pages["no token"] = b.html()
	if r, _ := c.h.index.Get("S0001"); r.Summary == nil || r.Summary.Quarantined != 1 {
		t.Errorf("S0001 after the refused posts: %+v, want its movement still quarantined", r.Summary)
	}
}

func (c *chain) otherPages(t *testing.T, b *browser, pages map[string]string) {
	t.Helper()
	for _, p := range []struct{ name, path, sel string }{
		{"bulk", "/bulk?state=quarantining", "#bulk"},
		{"problems", "/problems", "#problems"},
		{"findings", "/findings", "#findings"},
		{"records", "/records", "form"},
		{"journal", "/journal", "#journal"},
	} {
		b.open(c.h.url+p.path, p.sel)
		b.screenshot(p.name)
		pages[p.name] = b.html()
	}
	if got := b.text("#journal tbody tr td:nth-child(2)"); got == "" {
		t.Error("the journal page lists nothing")
	}
}

// discard is a as an action of no value.
func discard[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := a(ctx, t)
		return err
	})
}

func (c *chain) operatorRedrives(t *testing.T, b *browser, pages map[string]string) {
	t.Helper()
	waitFor(t, "S0001 to answer the console again after central's restart", func() bool {
		b.open(c.h.url+"/stores/S0001", "h2")
		return strings.Contains(b.html(), `id="status"`)
	})
	b.do("select the movement and redrive it",
		chromedp.WaitReady(chromedp.CSS(`input[name=key][value="`+c.quarKey+`"]`)),
		chromedp.Click(chromedp.CSS(`input[name=key][value="`+c.quarKey+`"]`)),
		chromedp.SetValue(chromedp.CSS("textarea[name=reason]"), "central's max_payload raised"),
		chromedp.Click(chromedp.CSS("#redrive")),
		chromedp.WaitReady(chromedp.CSS("#summary")))
	if got := b.text("#summary"); !strings.HasPrefix(got, "1 of 1 store(s) done, 1 movement(s) redriven.") {
		t.Errorf("the redrive's result: %q", got)
	}
	b.screenshot("redrive")
	pages["redrive"] = b.html()
	waitFor(t, "the store page to show the movement delivered", func() bool {
		b.open(c.h.url+"/stores/S0001", "h2")
		return strings.Contains(b.html(), `id="quarantine-empty"`) && strings.HasPrefix(b.text("#synced"), "1 held")
	})
	b.screenshot("store-delivered")
	pages["store delivered"] = b.html()
	// The store journalled the command with the operator's key and the
	// console user it was signed for.
	out, err := exec.Command(agentbin.Build(t), "audit", "--json", "--data-dir", c.quar.data).Output()
	if err != nil {
		t.Fatalf("agent audit: %v", err)
	}
	if !regexp.MustCompile(`"on_behalf_of": ?"console:alice@chain.example"`).Match(out) || !strings.Contains(string(out), "remote:"+c.op.PublicKey()) {
		t.Errorf("the store's journal does not name the operator key and alice:\n%s", out)
	}
	var asked, done bool
	for _, e := range journal(t, c.h) {
		asked = asked || (e.User == "alice@chain.example" && e.Action == "redrive" && e.Outcome == console.ActionAsked)
		done = done || (e.User == "alice@chain.example" && e.Action == "redrive" && e.Outcome == console.ActionDone && e.Keys == 1)
	}
	if !asked || !done {
		t.Errorf("hq's journal lacks alice's redrive asked and done: %+v", journal(t, c.h))
	}
}

// noPatientData searches every page the test read, hq's journal and the
// console's log for the patient marker.
func (c *chain) noPatientData(t *testing.T, pages map[string]string) {
	t.Helper()
	j, _ := os.ReadFile(c.h.journal)
	pages["hq journal"], pages["console log"] = string(j), c.h.logs.String()
	for name, text := range pages {
		if strings.Contains(text, patientMarker) {
			t.Errorf("%s carries the patient marker", name)
		}
	}
	b, _ := json.Marshal(pages)
	if len(pages) < 12 || len(b) < 10_000 {
		t.Errorf("only %d pages (%d bytes) were searched: the search proves little", len(pages), len(b))
	}
}
