package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rxedge/agent/intake"
	"github.com/rxedge/agent/intake/hl7"
	"github.com/rxedge/agent/testkit/agentbin"
)

// separatorMessage is a message of the largest accepted size made of field
// separators after its MSH-2: the input whose fields cost the most per byte.
func separatorMessage() []byte {
	b := []byte("MSH|^~\\&")
	return append(b, bytes.Repeat([]byte("|"), intake.DefaultMaxMessageBytes-len(b))...)
}

// ordinaryMessage is an RDS^O13 of nearly the largest accepted size, of
// the largest number of segments accepted, as a pharmacy system sends a
// day's dispenses: order groups (ORC, RXE, RXD) each with a note (NTE).
// Every RXD is a dispense of its own, so the agent stores them all.
func ordinaryMessage(conn int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "MSH|^~\\&|PHARMSYS|STORE42|RXEDGE|S0042|20260301093000-0500||RDS^O13^RDS_O13|BIG%d|P|2.5.1\r", conn)
	b.WriteString("PID|1||MRN1^^^HOSP^MR||DOE^JANE||19700101|F\r")
	rxe := make([]string, 36)
	rxe[0], rxe[2], rxe[3], rxe[5], rxe[10], rxe[11], rxe[35] = "RXE", "00406-0552-62^Oxycodone 5 mg tab^NDC", "5", "TAB", "30", "EA", "II"
	groups := (hl7.MaxSegments - 2) / 4
	// The note fills each group to an even share of the limit.
	share := (intake.DefaultMaxMessageBytes - b.Len() - 64) / groups
	for g := range groups {
		start := b.Len()
		fmt.Fprintf(&b, "ORC|RE|PLACER%d|FILL%d\r%s\rRXD|1|00406-0552-62^Oxycodone 5 mg tab^NDC|202603010930-0500|30|EA||RXBIG%d-%d\rNTE|1||",
			g, g, strings.Join(rxe, "|"), conn, g)
		note := "Counselled on dosage and storage; take with food. "
		for b.Len()-start < share-len(note)-1 {
			b.WriteString(note)
		}
		b.WriteString("\r")
	}
	return b.Bytes()
}

// TestHL7PeakRSS sends the built agent 32 connections at once (the default
// max_connections), from 32 addresses, each with one message of the largest accepted size
// (max_message_bytes, 1 MiB): once made of field separators only, and on
// a second run of the agent an ordinary message of as many dispenses as
// fit (499 each, all stored). The peak resident memory (VmHWM) above the
// idle agent must stay within six times what the connections sent,
// whatever the input: a decoder that splits before it counts took the
// first case to a gigabyte (32 times), where the ordinary messages, the
// data file's pages included, take about four. The figures are logged
// for the record.
func TestHL7PeakRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/<pid>/status")
	}
	const conns = intake.DefaultMaxConnections
	// The bound on the growth, as a multiple of what all connections sent.
	const factor = 6
	cases := []struct {
		name string
		msg  func(conn int) []byte
		ack  string
	}{
		{"field separators", func(int) []byte { return separatorMessage() }, hl7.AR},
		{"ordinary dispenses", ordinaryMessage, hl7.AA},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ingest, hl7Addr := agentbin.FreeAddr(t), agentbin.FreeAddr(t)
			a := startAgent(t, filepath.Join(t.TempDir(), "data"), ingest, nil, "--hl7-listen", hl7Addr)
			msgs := make([][]byte, conns)
			sent := 0
			for i := range msgs {
				msgs[i] = hl7.AppendFrame(nil, tc.msg(i))
				sent += len(msgs[i])
			}
			idle := peakRSS(t, a.cmd.Process.Pid)
			cs := make([]net.Conn, conns)
			for i := range cs {
				// Each from an address of its own (127.0.0.0/8 is all
				// loopback on Linux): 32 senders, within the limit per
				// peer.
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(i+1))}}
				c, err := d.Dial("tcp", hl7Addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(2 * time.Minute)) // a hung test fails, it does not hang
				cs[i] = c
			}
			errs := make(chan error, conns)
			for i, c := range cs {
				go func() {
					if _, err := c.Write(msgs[i]); err != nil {
						errs <- fmt.Errorf("connection %d: write: %w", i, err)
						return
					}
					ack, err := hl7.NewFrameReader(c, 0).Next()
					if err != nil {
						errs <- fmt.Errorf("connection %d: reading the ACK: %w", i, err)
						return
					}
					errs <- ackCode(ack, tc.ack)
				}()
			}
			for range cs {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
			peak := peakRSS(t, a.cmd.Process.Pid)
			grew := peak - idle
			t.Logf("%s: %d connections sent %.1f MiB; peak RSS %.1f MiB (idle %.1f MiB), grew by %.2f× what was sent",
				tc.name, conns, float64(sent)/(1<<20), float64(peak)/(1<<20), float64(idle)/(1<<20), float64(grew)/float64(sent))
			if grew > factor*int64(sent) {
				t.Errorf("peak RSS grew by %d bytes, more than %d× the %d bytes sent", grew, factor, sent)
			}
		})
	}
}

// ackCode checks that ack's MSA-1 is want.
func ackCode(ack []byte, want string) error {
	m, err := hl7.Parse(ack)
	if err != nil {
		return fmt.Errorf("the ACK does not parse: %w", err)
	}
	msa := m.Find("MSA")
	if len(msa) != 1 {
		return fmt.Errorf("an ACK without one MSA")
	}
	code, _ := m.Get(msa[0], 1, 1, 0, 0)
	if code != want {
		errs := []string{}
		for _, e := range m.Find("ERR") {
			errs = append(errs, e.Raw(2)+" "+e.Raw(3))
		}
		return fmt.Errorf("ACK %s %v, want %s", code, errs, want)
	}
	return nil
}

// TestHL7RefusalLoopIsCountedNotLogged connects to the built agent's HL7
// listener in a loop while the one connection allowed is held: every
// refusal is counted in rxedge_intake_hl7_refusals_total, while the log
// gains a line when the loop starts and one a minute after (RefusalWindow),
// not one a connection. After a clean stop, the lines' counts add up to
// every refusal.
func TestHL7RefusalLoopIsCountedNotLogged(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("stops the agent with SIGTERM")
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfg, []byte("intake:\n  hl7:\n    max_connections: 1\n"), 0o600)
	ingest, hl7Addr := agentbin.FreeAddr(t), agentbin.FreeAddr(t)
	a := startAgent(t, filepath.Join(dir, "data"), ingest, nil, "--config", cfg, "--hl7-listen", hl7Addr)
	held, err := net.Dial("tcp", hl7Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	held.SetDeadline(time.Now().Add(time.Minute))
	held.Write(hl7.AppendFrame(nil, []byte(rdsMessage("L1", "RXLOOP", "1"))))
	ack, err := hl7.NewFrameReader(held, 0).Next()
	if err != nil {
		t.Fatalf("the held connection's ACK: %v", err)
	}
	if err := ackCode(ack, hl7.AA); err != nil {
		t.Fatal(err)
	}

	const n = 3000
	before := strings.Count(a.stderr.String(), "\n")
	start := time.Now()
	for range n {
		c, err := net.Dial("tcp", hl7Addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(time.Minute))
		io.Copy(io.Discard, c) // the agent closes it
		c.Close()
	}
	elapsed := time.Since(start)
	lines := strings.Count(a.stderr.String(), "\n") - before
	bound := 2 + int(elapsed/hl7.RefusalWindow)
	t.Logf("%d refused connections in %s: %d log lines (bound %d)", n, elapsed.Round(time.Millisecond), lines, bound)
	if lines > bound {
		t.Errorf("%d log lines for %d refused connections in %s, more than %d:\n%s", lines, n, elapsed, bound, a.stderr.Tail(5))
	}
	want := fmt.Sprintf(`rxedge_intake_hl7_refusals_total{reason="too_many_connections"} %d`, n)
	if m := scrape(t, ingest); !bytes.Contains(m, []byte(want)) {
		t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "rxedge_intake_hl7_refusals_total"))
	}

	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(time.Minute):
		t.Fatal("the agent did not stop within a minute of SIGTERM")
	}
	logged := 0
	for _, m := range regexp.MustCompile(`"msg":"HL7_REFUSED","reason":"too_many_connections","peer":"[^"]*","count":(\d+)`).FindAllStringSubmatch(a.stderr.String(), -1) {
		k, _ := strconv.Atoi(m[1])
		logged += k
	}
	if logged != n {
		t.Errorf("the log lines count %d refusals, want %d:\n%s", logged, n, a.stderr.Tail(5))
	}
}
