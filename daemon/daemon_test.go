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

	"github.com/rxedge/agent/internal/natstest"
	"github.com/rxedge/agent/settings"
	"github.com/rxedge/agent/status"
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
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
}
