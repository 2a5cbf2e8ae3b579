package console_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/headoffice/console"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/testkit/agentbin"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/syncbuf"
)

func TestMain(m *testing.M) {
	code := m.Run()
	agentbin.Cleanup()
	os.Exit(code)
}

// patientMarker is written into every patient field the intakes are
// sent; it must come out on no page.
const patientMarker = "ZQXPATIENTMARKER"

// agentProc is a built agent running as a child process.
type agentProc struct {
	cmd    *exec.Cmd
	ingest string
	data   string
	stderr *syncbuf.Buffer
	exited chan error
}

// startAgent runs the built agent for store against hub, trusting op's
// key, writing its summary every 300 ms; extra are more flags.
func startAgent(t *testing.T, hub *natstest.Server, store string, op *command.Signer, config string, extra ...string) *agentProc {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agent.yaml")
	body := "sync:\n  heartbeat_interval: 300ms\nremote:\n  operator_keys: [" + op.PublicKey() + "]\n" + config
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	a := &agentProc{ingest: agentbin.FreeAddr(t), data: filepath.Join(dir, "data"), stderr: &syncbuf.Buffer{}, exited: make(chan error, 1)}
	args := append([]string{"run", "--config", cfg, "--store-id", store, "--data-dir", a.data, "--ingest", a.ingest, "--nats", hub.URL(), "--log-level", "warn"}, extra...)
	a.cmd = exec.Command(agentbin.Build(t), args...)
	a.cmd.Stderr, a.cmd.Stdout = a.stderr, io.Discard
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.exited <- a.cmd.Wait() }()
	t.Cleanup(a.kill)
	waitFor(t, "agent "+store+" ready", func() bool {
		select {
		case err := <-a.exited:
			t.Fatalf("agent %s exited: %v\n%s", store, err, a.stderr)
		default:
		}
		resp, err := http.Get("http://" + a.ingest + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return a
}

// kill kills the agent with SIGKILL and waits for it.
func (a *agentProc) kill() {
	if a.cmd.Process != nil {
		a.cmd.Process.Kill()
	}
	select {
	case <-a.exited:
	case <-time.After(10 * time.Second):
	}
}

// post submits movements to the agent's ingest listener.
func (a *agentProc) post(t *testing.T, body string) {
	t.Helper()
	resp, err := http.Post("http://"+a.ingest+"/v1/movements", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST /v1/movements: %d %s", resp.StatusCode, b)
	}
}

// waitFor polls cond every 50 ms until it holds, failing after two
// minutes with what was awaited.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited two minutes for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// hqConsole is a console on loopback with what hq gives it.
type hqConsole struct {
	srv     *console.Server
	url     string
	index   *fleet.Index
	journal string
	logs    *syncbuf.Buffer
}

// consoleOptions are the options the tests share: the proxy mode,
// trusting 127.0.0.1 only, with alice an operator and auditor, olga an
// operator and victor a viewer.
func consoleOptions() console.Options {
	return console.Options{
		Listen: "127.0.0.1:0", Auth: console.AuthProxy,
		ProxyFrom: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Roles: map[string][]string{
			"alice@chain.example":  {console.RoleOperator, console.RoleAuditor},
			"olga@chain.example":   {console.RoleOperator},
			"victor@chain.example": {console.RoleViewer},
		},
	}
}

// startConsole runs an index over hub's fleet view and a console over
// it, signing with op, changed by set.
func startConsole(t *testing.T, hub *natstest.Server, op *command.Signer, roster []fleet.RosterStore, set func(*console.Options)) *hqConsole {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	nc := natstest.Connect(t, hub.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.CustomInboxPrefix("_INBOX_ops"))
	h := &hqConsole{logs: &syncbuf.Buffer{}, journal: filepath.Join(t.TempDir(), "console-journal.jsonl")}
	h.index = fleet.NewIndex(fleet.IndexOptions{Roster: roster, Limits: fleet.Limits{Stale: 3 * time.Second, Silent: time.Hour, MaxAge: time.Hour}, Rejudge: 200 * time.Millisecond})
	idxDone := make(chan error, 1)
	go func() { idxDone <- h.index.Run(ctx, natstest.JetStream(t, nc)) }()
	j, err := console.OpenFileJournal(h.journal)
	if err != nil {
		t.Fatal(err)
	}
	o := consoleOptions()
	o.Index, o.Client, o.Journal = h.index, fleet.NewClient(nc, op), j
	o.Logger = newLogger(h.logs)
	if set != nil {
		set(&o)
	}
	h.srv, err = console.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := h.srv.Listen()
	if err != nil {
		t.Fatal(err)
	}
	h.url = "http://" + ln.Addr().String()
	if o.TLS != nil {
		h.url = "https://" + ln.Addr().String()
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- h.srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-idxDone
		if err := <-srvDone; err != nil && err != http.ErrServerClosed {
			t.Errorf("console: Serve: %v", err)
		}
		j.Close()
	})
	return h
}

// get fetches a page as user (through the proxy's header), from the
// loopback address local ("" for any).
func get(t *testing.T, h *hqConsole, user, local, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.url+path, nil)
	if user != "" {
		req.Header.Set(console.DefaultProxyHeader, user)
	}
	resp, err := clientFrom(local).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// clientFrom is an HTTP client whose connections come from the loopback
// address local ("" for the system's choice), following no redirect.
func clientFrom(local string) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	return &http.Client{
		Transport:     &http.Transport{DialContext: d.DialContext},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       time.Minute,
	}
}

// mllpFrame frames an HL7 message for MLLP.
func mllpFrame(msg string) []byte { return []byte("\x0b" + msg + "\x1c\r") }

// sendHL7 sends one HL7 message over MLLP and reads its ACK.
func sendHL7(t *testing.T, addr, msg string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(mllpFrame(msg)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var got []byte
	for !strings.Contains(string(got), "\x1c\r") {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("read the ACK: %v (so far %q)", err, got)
		}
		got = append(got, buf[:n]...)
	}
	return string(got)
}

// rdsMessage is an RDS^O13 whose patient segments (PID, PV1, NK1, IN1)
// carry the marker in every field a patient's data goes in.
func rdsMessage(ctl, rx string) string {
	m := patientMarker
	rxe := make([]string, 36)
	rxe[0], rxe[2], rxe[3], rxe[5], rxe[10], rxe[11], rxe[35] = "RXE", "00406-0552-62^Oxycodone 5 mg tab^NDC", "5", "TAB", "30", "EA", "II"
	return strings.Join([]string{
		"MSH|^~\\&|PHARMSYS|STORE42|RXEDGE|S0042|20260301093000-0500||RDS^O13^RDS_O13|" + ctl + "|P|2.5.1",
		"PID|1|" + m + "EXT|" + m + "MRN^^^HOSP^MR|" + m + "ALT|" + m + "LAST^" + m + "FIRST^Q||19700101|F|||1 " + m + " ST^^" + m + "TOWN^NY^10001||555" + m,
		"PV1|1|O|" + m + "WARD^101^A||||1234^" + m + "DOC^JANE",
		"NK1|1|" + m + "KIN^ANNA|SPO",
		"IN1|1|PLAN1|" + m + "INSID|" + m + "INSCO",
		"ORC|RE|" + m + "PLACER|FILL1",
		strings.Join(rxe, "|"),
		"RXD|1|00406-0552-62^Oxycodone 5 mg tab^NDC|202603010930-0500|30|EA||" + rx,
	}, "\r") + "\r"
}

// movementJSON is a valid movement with the given id and extra fields.
func movementJSON(id, extra string) string {
	return fmt.Sprintf(`{"movement_id":%q,"type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"%s}`, id, extra)
}
