package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestMetricsAndHeartbeat runs the whole agent against a hub: after a few
// movements are delivered, /metrics reports them by state and class with
// the outcome, latency and connection metrics, and the agent publishes its
// status on rx.status.<store> (counts and states, no payload).
func TestMetricsAndHeartbeat(t *testing.T) {
	h := natstest.StartHub(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := settings.Config{StoreID: "S0042", DataDir: t.TempDir()}
	c.Ingest.Listen = addr
	c.NATS.Servers = []string{h.URL()}
	c.Sync.ResumeJitter = 10 * time.Millisecond
	c.Sync.HeartbeatInterval = 100 * time.Millisecond
	opts, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}

	watcher := natstest.Connect(t, h.URL())
	beats := make(chan *nats.Msg, 16)
	if _, err := watcher.ChanSubscribe("rx.status.S0042", beats); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- Run(ctx, opts, nil, Hooks{Ready: func(string) { close(ready) }}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-ready

	var body []string
	for i := 0; i < 5; i++ {
		sched := ""
		if i%2 == 0 {
			sched = `,"schedule":"CIV"`
		}
		body = append(body, fmt.Sprintf(`{"movement_id":"M%d","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"%s}`, i, sched))
	}
	resp, err := http.Post("http://"+addr+"/v1/movements", "application/json", strings.NewReader("["+strings.Join(body, ",")+"]"))
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submission: %v %v", resp, err)
	}
	resp.Body.Close()

	var beat status.Status
	deadline := time.After(20 * time.Second)
	for beat.Counts.Synced.Total != 5 {
		select {
		case m := <-beats:
			if err := json.Unmarshal(m.Data, &beat); err != nil {
				t.Fatalf("heartbeat: %v", err)
			}
		case <-deadline:
			t.Fatalf("no heartbeat with 5 synced; last %+v", beat)
		}
	}
	if beat.StoreID != "S0042" || beat.Connection.State != status.Online || beat.Counts.Synced.Controlled != 3 {
		t.Fatalf("heartbeat %+v", beat)
	}

	resp, err = http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(b)
	for _, want := range []string{
		`rxedge_movements{class="controlled",state="synced"} 3`,
		`rxedge_movements{class="ordinary",state="synced"} 2`,
		`rxedge_movements{class="ordinary",state="pending"} 0`,
		`rxedge_sync_outcomes_total{outcome="stored"} 5`,
		`rxedge_connection_state{state="online"} 1`,
		`rxedge_connection_state{state="offline"} 0`,
		`rxedge_ingest_movements_total{result="accepted"} 5`,
		`rxedge_ingest_duration_seconds_count 1`,
		`rxedge_publish_duration_seconds_count{path="single"}`,
		`rxedge_oldest_pending_age_seconds 0`,
		`rxedge_connection_problem{reason="authentication"} 0`,
		`rxedge_build_info{`,
		`rxedge_data_dir_free_bytes `,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(text, "rxedge_last_sync_timestamp_seconds 0\n") || !strings.Contains(text, "rxedge_last_sync_timestamp_seconds ") {
		t.Errorf("/metrics has no last sync time after 5 synced")
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
}

// TestMetricsListener: with ingest off, the metrics listener of its own
// serves /metrics behind its token, and nothing else of the agent.
func TestMetricsListener(t *testing.T) {
	token := strings.Repeat("k", 24)
	c := settings.Config{StoreID: "S0042", DataDir: t.TempDir()}
	c.Ingest.Listen = "off"
	c.Metrics.Listen = "127.0.0.1:0"
	c.Metrics.Token = token
	opts, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]string, 1)
	var ingest string
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, opts, nil, Hooks{
			Ready:        func(a string) { ingest = a },
			MetricsReady: func(a string) { addrs <- [2]string{ingest, a} },
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	var a [2]string
	select {
	case a = <-addrs:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	if a[0] != "" || a[1] == "" {
		t.Fatalf("ingest %q, metrics %q: want no ingest and a metrics listener", a[0], a[1])
	}
	get := func(path, tok string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+a[1]+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: %d, want 401", code)
	}
	if code, body := get("/metrics", token); code != http.StatusOK || !strings.Contains(body, `rxedge_refused_tokens_total{cause="missing",listener="metrics"} 1`) {
		t.Errorf("/metrics with the token: %d\n%s", code, body)
	}
	if code, _ := get("/v1/status", token); code != http.StatusNotFound {
		t.Errorf("/v1/status on the metrics listener: %d, want 404", code)
	}
}
