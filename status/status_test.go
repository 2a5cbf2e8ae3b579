package status

import (
	"strings"
	"testing"
	"time"
)

// TestCentralAttention: central refusing the agent always needs someone;
// not reaching central needs someone only on a store that never delivered
// (its address is wrong), not on one whose line is down (P4).
func TestCentralAttention(t *testing.T) {
	since := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		reason string // "" for no problem
		synced uint64
		want   string // "" for none, else a part of it
	}{
		{"", 0, ""},
		{"", 10, ""},
		{ReasonAuth, 0, "central refuses the agent: authentication failed (authorization violation) from nats://central:4222"},
		{ReasonAuth, 10, "central refuses the agent"},
		{ReasonAuthorization, 10, "permission denied"},
		{ReasonTLS, 10, "TLS failed"},
		{ReasonNoStream, 10, "stream missing"},
		{ReasonNoJetStream, 10, "JetStream not enabled"},
		{ReasonRefused, 0, "central has never been reached from this store: connection refused"},
		{ReasonDNS, 0, "host name does not resolve"},
		{ReasonTimeout, 0, "no answer in time"},
		{ReasonOther, 0, "central has never been reached"},
		{ReasonRefused, 10, ""},
		{ReasonDNS, 10, ""},
		{ReasonTimeout, 10, ""},
		{ReasonOther, 10, ""},
	}
	for _, tc := range tests {
		s := &Status{SyncedTotal: tc.synced, Connection: Connection{State: Offline}}
		if tc.reason != "" {
			s.Connection.Problem = &ConnProblem{Reason: tc.reason, Detail: "authorization violation", Server: "nats://central:4222", Since: &since}
		}
		got := s.CentralAttention()
		if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%q with %d synced: %q, want %q", tc.reason, tc.synced, got, tc.want)
		}
	}
}

func TestRenderShowsTheProblem(t *testing.T) {
	since := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	s := &Status{
		StoreID:     "S0001",
		GeneratedAt: since.Add(27 * time.Second),
		Connection: Connection{State: Offline, Since: &since, Servers: []string{"nats://central:4222"},
			Problem: &ConnProblem{Reason: ReasonAuth, Detail: "authorization violation", Server: "nats://central:4222", Since: &since}},
	}
	var b strings.Builder
	Render(&b, s, time.Hour)
	for _, want := range []string{
		"Central     offline: authentication failed (authorization violation) from nats://central:4222, since 2026-03-01 09:00:00 UTC (27s ago)\n",
		"Needs attention:\n  - central refuses the agent: authentication failed",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
}
