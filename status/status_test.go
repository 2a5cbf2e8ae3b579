package status

import (
	"strings"
	"testing"
	"time"
)

// TestConnectionNeedsSomeone: central refusing the agent always needs
// someone; not reaching central needs someone only on a store that never
// delivered (its address is wrong), not on one whose line is down (P4).
func TestConnectionNeedsSomeone(t *testing.T) {
	since := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	tests := []struct {
		reason   string // "" for no problem
		synced   uint64
		want     bool
		critical bool
	}{
		{"", 0, false, false},
		{"", 10, false, false},
		{ReasonAuth, 0, true, true},
		{ReasonAuth, 10, true, true},
		{ReasonAuthorization, 10, true, true},
		{ReasonTLS, 10, true, true},
		{ReasonNoStream, 10, true, true},
		{ReasonNoJetStream, 10, true, true},
		{ReasonRefused, 0, true, false},
		{ReasonDNS, 0, true, false},
		{ReasonTimeout, 0, true, false},
		{ReasonOther, 0, true, false},
		{ReasonRefused, 10, false, false},
		{ReasonDNS, 10, false, false},
		{ReasonTimeout, 10, false, false},
		{ReasonOther, 10, false, false},
	}
	for _, tc := range tests {
		s := &Status{Agent: Agent{Running: true}, SyncedTotal: tc.synced, Connection: Connection{State: Offline, Since: &since}, GeneratedAt: since}
		if tc.reason != "" {
			s.Connection.Problem = &ConnProblem{Reason: tc.reason, Detail: "authorization violation", Server: "nats://central:4222", Since: &since}
		}
		var got *Problem
		for _, p := range s.Judge(PlainThresholds(time.Hour)) {
			if p.Code == CodeConnection {
				got = &p
			}
		}
		if (got != nil) != tc.want || got != nil && (got.Severity == SeverityCritical) != tc.critical {
			t.Errorf("%q with %d synced: %+v, want a problem %v (critical %v)", tc.reason, tc.synced, got, tc.want, tc.critical)
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
		"Needs attention:\n  - cannot use central: authentication, authorization violation from nats://central:4222",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
}

func TestRenderShowsTheIntakes(t *testing.T) {
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	last := now.Add(-90 * time.Second)
	s := &Status{StoreID: "S0001", GeneratedAt: now, Connection: Connection{State: Idle}, Intakes: []Intake{
		{Name: "http", Accepted: 12, Duplicates: 1, Rejected: 2, LastReceivedAt: &last},
		{Name: "hl7"},
		{Name: "asap", Accepted: 300, Rejected: 3, LastReceivedAt: &last, FilesDone: 1, FilesRejected: 1, FilesSetAside: 2},
	}}
	var b strings.Builder
	Render(&b, s, time.Hour)
	for _, want := range []string{
		"Intake      accepted  duplicates  rejected  last received\n",
		"http              12           1         2  1m30s ago\n",
		"hl7                0           0         0  never\n",
		"asap             300           0         3  1m30s ago (files: 1 done, 1 rejected, 2 set aside in the folder: see ASAP_FILE_SET_ASIDE in the log)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
}
