package hl7

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/queue"
)

// ClientDir holds the npm MLLP client the tests send with.
const clientDir = "testdata/mllpclient"

// NodeClient returns the node binary and makes sure the npm client is
// installed. Without node the test is skipped, except under CI, where it
// fails: .ci/run installs node and the client.
func nodeClient(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node is not installed: .ci/run must install it (Debian nodejs, npm) for the HL7 client tests")
		}
		t.Skip("node is not installed: the HL7 tests with the npm MLLP client (node-hl7-client) need node and npm")
	}
	if _, err := os.Stat(filepath.Join(clientDir, "node_modules", "node-hl7-client")); err != nil {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = clientDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", clientDir, err, out)
		}
	}
	return node
}

// Ack is one acknowledgement as the npm client read it.
type Ack struct {
	MSA1 string   `json:"msa1"`
	MSA2 string   `json:"msa2"`
	Type string   `json:"type"`
	Errs []string `json:"errs"`
}

// SendWithNode sends msgs, in order on one connection, waiting for each
// ACK, with the npm client, and returns the ACKs it read.
func sendWithNode(t *testing.T, node, addr string, msgs []string) []Ack {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	f := filepath.Join(t.TempDir(), "msgs.json")
	b, _ := json.Marshal(msgs)
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "send.mjs", port, f)
	cmd.Dir = clientDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node send.mjs: %v\n%s", err, stderr.String())
	}
	var acks []Ack
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var a Ack
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("client output %q: %v", sc.Text(), err)
		}
		acks = append(acks, a)
	}
	if len(acks) != len(msgs) {
		t.Fatalf("%d ACKs for %d messages\n%s\n%s", len(acks), len(msgs), out, stderr.String())
	}
	return acks
}

func startServer(t *testing.T, h *Handler, o intake.HL7Options) *Server {
	t.Helper()
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	opts := intake.Options{HL7: o}
	if errs := opts.Validate(); errs != nil {
		t.Fatal(errs)
	}
	s, err := Listen(opts.HL7, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// TestNPMClient sends realistic RDS^O13 and RDS^O01 messages with an HL7
// library the project did not write, and checks the answers as that
// library reads them.
func TestNPMClient(t *testing.T) {
	node := nodeClient(t)
	h, q := newHandler(t)
	h.Sink.Clock = nil // real time: the client stamps nothing we check
	s := startServer(t, h, intake.HL7Options{})
	o01 := strings.Replace(rds("N5", "RX501", "1", "12345-6789-01", "10", "EA", ""), "RDS^O13^RDS_O13", "RDS^O01", 1)
	o01 = strings.Replace(o01, "|2.5.1|", "|2.3|", 1)
	msgs := []string{
		rds("N1", "RX500", "1", "12345-6789-01", "30", "EA", "II"),
		rds("N2", "RX500", "1", "12345-6789-01", "30", "EA", "II"), // resent under a new control id
		rds("N3", "RX500", "2", "12345-6789-01", "30", "EA", "II"), // the refill: a new dispense
		rds("N4", "RX502", "1", "1234", "30", "EA", ""),            // a bad NDC
		o01,
		strings.Replace(rds("N6", "RX503", "1", "12345-6789-01", "1", "EA", ""), "RDS^O13^RDS_O13", "ADT^A01^ADT_A01", 1),
		rds("N7", "RX504", "1", "12345-6789-01", "1", "BOX", ""),
	}
	acks := sendWithNode(t, node, s.Addr().String(), msgs)
	want := []struct{ code, ctl, err string }{
		{AA, "N1", ""}, {AA, "N2", ""}, {AA, "N3", ""},
		{AE, "N4", "RXD^1^2^1^1|102"}, {AA, "N5", ""},
		{AR, "N6", "MSH^1^9^1|200"}, {AE, "N7", "RXD^1^5^1^1|103"},
	}
	for i, w := range want {
		a := acks[i]
		if a.MSA1 != w.code || a.MSA2 != w.ctl || !strings.HasPrefix(a.Type, "ACK") {
			t.Errorf("message %d: MSA %s|%s type %s, want %s|%s ACK", i, a.MSA1, a.MSA2, a.Type, w.code, w.ctl)
		}
		if w.err != "" && (len(a.Errs) == 0 || a.Errs[0] != w.err) {
			t.Errorf("message %d: ERR %v, want %s", i, a.Errs, w.err)
		}
		if w.err == "" && len(a.Errs) != 0 {
			t.Errorf("message %d: ERR %v on an AA", i, a.Errs)
		}
	}
	st, _ := q.Stats()
	if n := st.Count(queue.Pending); n != 3 {
		t.Fatalf("%d movements stored, want 3 (RX500 fill 1 once, its refill, RX501)", n)
	}
}
