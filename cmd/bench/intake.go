package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/daemon"
	"github.com/rxedge/agent/intake/hl7"
	"github.com/rxedge/agent/settings"
)

const storeIntake = "S-INTAKE"

// intakeAgent is the whole agent (daemon.Run, no central) with its HTTP
// ingest, HL7 listener and ASAP folder on.
type intakeAgent struct {
	agent
	hl7Addr, asapDir, socket string
}

func startIntakeAgent(ctx context.Context, dir string) (*intakeAgent, error) {
	form := filepath.Join(dir, "formulary.csv")
	if err := os.WriteFile(form, []byte("ndc,schedule\n00406-0552-62,CII\n"), 0o600); err != nil {
		return nil, err
	}
	c := settings.Config{StoreID: storeIntake, DataDir: filepath.Join(dir, "data")}
	c.Ingest.Listen = "127.0.0.1:0"
	c.Intake.HL7.Listen = "127.0.0.1:0"
	c.Intake.ASAP.Dir = filepath.Join(dir, "asap")
	c.Intake.ASAP.PollInterval = 10 * time.Millisecond
	c.Intake.Formulary = form
	o, err := c.Validate()
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithCancel(ctx)
	a := &intakeAgent{agent: agent{cancel: cancel, done: make(chan error, 1)}, asapDir: o.Intake.ASAP.Dir, socket: control.Endpoint(o.DataDir)}
	ready, hl7Ready := make(chan string, 1), make(chan string, 1)
	go func() {
		a.done <- daemon.Run(actx, o, nil, daemon.Hooks{Ready: func(addr string) { ready <- addr }, HL7Ready: func(addr string) { hl7Ready <- addr }})
	}()
	select {
	case a.addr = <-ready:
		a.hl7Addr = <-hl7Ready
		return a, nil
	case err := <-a.done:
		cancel()
		return nil, fmt.Errorf("the agent stopped before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		a.stop()
		return nil, errors.New("the agent was not ready within 30s")
	}
}

// rdsFor is an RDS^O13 for dispense i of round r.
func rdsFor(r, i int, now time.Time) []byte {
	ts := now.Add(-time.Hour).Format("200601021504-0700")
	return []byte(fmt.Sprintf("MSH|^~\\&|BENCH|STORE|RXEDGE|%s|%s||RDS^O13^RDS_O13|B%d-%d|P|2.5.1\r"+
		"PID|1||MRN%d^^^H^MR||DOE^JANE||19700101|F\r"+
		"ORC|RE|P%d|F%d\r"+
		"RXE|^^^20260301|00406-0552-62^Oxycodone 5 mg tab^NDC|5||TAB\r"+
		"RXD|1|00406-0552-62^Oxycodone 5 mg tab^NDC|%s|%d|EA||RX-H-%d-%09d\r",
		storeIntake, ts, r, i, i, i, i, ts, 1+i%120, r, i))
}

// sendHL7 sends n messages of round r from conns connections, each
// waiting for its ACK before the next, and times each until its AA.
func sendHL7(ctx context.Context, addr string, r, n, conns int, now time.Time) (ingestResult, []time.Duration, error) {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	start := time.Now()
	for range conns {
		g.Go(func() error {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return err
			}
			defer c.Close()
			fr := hl7.NewFrameReader(c, 0)
			var buf []byte
			for gctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return nil
				}
				t0 := time.Now()
				buf = hl7.AppendFrame(buf[:0], rdsFor(r, i, now))
				if _, err := c.Write(buf); err != nil {
					return err
				}
				ack, err := fr.Next()
				if err != nil {
					return fmt.Errorf("reading the ACK: %w", err)
				}
				if !bytes.Contains(ack, []byte("\rMSA|AA|")) {
					return fmt.Errorf("message %d: not AA: %q", i, ack)
				}
				lat[i] = time.Since(t0)
			}
			return gctx.Err()
		})
	}
	if err := g.Wait(); err != nil {
		return ingestResult{}, nil, err
	}
	el := time.Since(start)
	return ingestResult{n: n, elapsed: el, rate: rate(n, el)}, lat, nil
}

// asapFile is an ASAP 4.2B file of n dispenses of round r.
func asapFile(r, n int, now time.Time) []byte {
	var b strings.Builder
	ctl := fmt.Sprintf("BENCH%d", r)
	filled := now.Add(-24 * time.Hour).Format("20060102")
	fmt.Fprintf(&b, "TH*4.2B*%s*01**%s*101500*P**~~\nIS*5550001111*BENCH*~\nPHA*1234567893*3312345*BS1234563~\n", ctl, filled)
	for i := range n {
		fmt.Fprintf(&b, "PAT*NY*06*ID%d*******DOE*JANE~\nDSP*00*RX-A-%d-%09d*%s*0*%s*00*01*00406055262*%d*30*01~\nPRE*1987654321*AB1234563~\n", i, r, i, filled, filled, 1+i%120)
	}
	fmt.Fprintf(&b, "TP*%d~\nTT*%s*%d~\n", 3*n+2, ctl, 3*n+5)
	return []byte(b.String())
}

// enqueueLines is the same dispenses as movements, one JSON object per
// line, as `agent enqueue -f` reads them.
func enqueueLines(r, n int, now time.Time) [][]byte {
	at := now.Add(-24*time.Hour).Format("2006-01-02") + "T00:00:00Z"
	out := make([][]byte, n)
	for i := range n {
		out[i] = []byte(fmt.Sprintf(`{"movement_id":"enq:RX-E-%d-%09d","type":"dispense","ndc":"00406055262","quantity":"%d","unit":"EA","occurred_at":"%s","schedule":"CII","rx_ref":"RX-E-%d-%09d"}`+"\n", r, i, 1+i%120, at, r, i))
	}
	return out
}

// enqueueChunkLines is `agent enqueue`'s request size.
const enqueueChunkLines = 500

// enqueueAll sends lines over the control socket as `agent enqueue -f`
// does: chunks of enqueueChunkLines, each stored or refused line by line.
func enqueueAll(ctx context.Context, c *control.Client, lines [][]byte) (ingestResult, error) {
	start := time.Now()
	for lo := 0; lo < len(lines); lo += enqueueChunkLines {
		hi := min(lo+enqueueChunkLines, len(lines))
		res, err := c.SubmitEach(ctx, bytes.Join(lines[lo:hi], nil))
		if err != nil {
			return ingestResult{}, err
		}
		for _, r := range res {
			if r.Status != control.StatusAccepted {
				return ingestResult{}, fmt.Errorf("enqueue: line %d %s", lo+r.Item, r.Status)
			}
		}
	}
	el := time.Since(start)
	return ingestResult{n: len(lines), elapsed: el, rate: rate(len(lines), el)}, nil
}

// dropASAP renames a complete file into the folder and times it until it
// is in done/ (every movement committed and the move durable); the folder
// is looked at every 10 ms, which the figure includes.
func dropASAP(ctx context.Context, dir string, name string, body []byte, n int) (ingestResult, error) {
	tmp := filepath.Join(dir, name+".tmp")
	if err := os.WriteFile(tmp, body, 0o600); err != nil {
		return ingestResult{}, err
	}
	start := time.Now()
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return ingestResult{}, err
	}
	done := filepath.Join(dir, "done", name)
	deadline := start.Add(5 * time.Minute)
	for {
		if _, err := os.Stat(done); err == nil {
			break
		}
		if _, err := os.Stat(filepath.Join(dir, "rejected", name)); err == nil {
			rep, _ := os.ReadFile(filepath.Join(dir, "rejected", name+".report.json"))
			return ingestResult{}, fmt.Errorf("ASAP file rejected: %s", rep)
		}
		if ctx.Err() != nil {
			return ingestResult{}, ctx.Err()
		}
		if time.Now().After(deadline) {
			return ingestResult{}, errors.New("the ASAP file was not done within 5 minutes")
		}
		time.Sleep(2 * time.Millisecond)
	}
	el := time.Since(start)
	return ingestResult{n: n, elapsed: el, rate: rate(n, el)}, nil
}

// benchIntake compares the HL7 listener with HTTP ingest (8 connections,
// one movement each, every answer awaited) and an ASAP file with `agent
// enqueue -f` of the same movements, on one agent, taking turns in rounds
// with the order changed every round.
func benchIntake(ctx context.Context, b *bench) error {
	const scn = "6 intake"
	s := b.size
	dir, err := b.dir("intake")
	if err != nil {
		return err
	}
	a, err := startIntakeAgent(ctx, dir)
	if err != nil {
		return err
	}
	defer a.stop()
	client := newClient(s.intakeConns)
	defer client.CloseIdleConnections()
	ctl := control.Dial(a.socket)
	defer ctl.CloseIdleConnections()

	var web, h7, file, enq ingestResult
	var hl7Lat []time.Duration
	httpItems := generateN(storeIntake, 0, s.intakeN*s.intakeRounds, b.now)
	for r := range s.intakeRounds {
		doHTTP := func() error {
			res, _, err := postAll(ctx, client, a.addr, httpItems[r*s.intakeN:(r+1)*s.intakeN], s.intakeConns)
			web = web.plus(res)
			return err
		}
		doHL7 := func() error {
			res, lat, err := sendHL7(ctx, a.hl7Addr, r, s.intakeN, s.intakeConns, b.now)
			h7 = h7.plus(res)
			hl7Lat = append(hl7Lat, lat...)
			return err
		}
		doASAP := func() error {
			res, err := dropASAP(ctx, a.asapDir, fmt.Sprintf("bench-%d.asap", r), asapFile(r, s.asapN, b.now), s.asapN)
			file = file.plus(res)
			return err
		}
		doEnqueue := func() error {
			res, err := enqueueAll(ctx, ctl, enqueueLines(r, s.asapN, b.now))
			enq = enq.plus(res)
			return err
		}
		steps := []func() error{doHTTP, doHL7, doEnqueue, doASAP}
		if r%2 == 1 {
			steps = []func() error{doHL7, doHTTP, doASAP, doEnqueue}
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
		b.logf("intake: round %d/%d: HTTP %s, HL7 %s, enqueue %s, ASAP %s mov/s", r+1, s.intakeRounds,
			thousands(web.rate), thousands(h7.rate), thousands(enq.rate), thousands(file.rate))
	}
	st, err := getStatus(ctx, client, "http://"+a.addr+"/v1/status")
	if err != nil {
		return err
	}
	want := uint64(s.intakeRounds * (2*s.intakeN + 2*s.asapN))
	if st.Counts.Pending.Total != want {
		return fmt.Errorf("the agent holds %d pending movements after %d were acknowledged", st.Counts.Pending.Total, want)
	}
	if err := a.stop(); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	b.rep.ratio(scn, "hl7_vs_http_ingest", fmt.Sprintf("HL7 RDS^O13 over MLLP, %d connections each awaiting its AA, %s messages, vs HTTP", s.intakeConns, thousands(float64(h7.n))),
		h7.rate/web.rate, fmt.Sprintf("HTTP ingest on the same agent, %d keep-alive clients, one movement per request, same rounds: %s mov/s", s.intakeConns, thousands(web.rate)), atLeast(0.8))
	b.rep.value(scn, "hl7_rate", "HL7 rate", h7.rate, "msg/s", nil)
	b.rep.value(scn, "hl7_ack_p50_ms", "HL7 AA latency p50 (after fsync)", ms(quantile(hl7Lat, 0.50)), "ms", nil)
	b.rep.value(scn, "hl7_ack_p99_ms", "HL7 AA latency p99 (after fsync)", ms(quantile(hl7Lat, 0.99)), "ms", nil)
	b.rep.ratio(scn, "asap_vs_enqueue", fmt.Sprintf("ASAP 4.2B file of %s dispenses, from its rename into the folder until it is in done/ (folder looked at every 10 ms), vs enqueue", thousands(float64(s.asapN))),
		file.rate/enq.rate, fmt.Sprintf("the same dispenses as JSON lines sent as `agent enqueue -f` does (chunks of %d over the control socket), same rounds: %s mov/s", enqueueChunkLines, thousands(enq.rate)), atLeast(0.8))
	b.rep.value(scn, "asap_rate", "ASAP file intake rate", file.rate, "mov/s", nil)
	return nil
}
