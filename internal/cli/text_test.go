package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/rxedge/agent/central/command"
)

func TestAge(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"},
		{45 * time.Second, "45s"},
		{12*time.Minute + 30*time.Second, "12m"},
		{3*time.Hour + 5*time.Minute, "3h05m"},
		{47 * time.Hour, "47h00m"},
		{4*24*time.Hour + 7*time.Hour, "4d07h"},
	} {
		if got := Age(tc.d); got != tc.want {
			t.Errorf("Age(%s) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestOneLine(t *testing.T) {
	if got := OneLine("a\nb\tc\x7fd"); got != "a b c d" {
		t.Errorf("got %q", got)
	}
}

// TestQuarantinePrinters: what both binaries print for a quarantine list
// and for keys that were not quarantined.
func TestQuarantinePrinters(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	WriteQuarantined(&b, command.ListResult{Matched: 3, Items: []command.Item{
		{Key: "k1", Class: "controlled", Schedule: "CII", Reason: "permanent:too_large", Attempts: 1, QuarantinedAt: now.Add(-90 * time.Minute), MovementID: "m1"},
	}}, now)
	want := "KEY  CLASS           REASON               ATTEMPTS  QUARANTINED  MOVEMENT_ID\n" +
		"k1   controlled/CII  permanent:too_large  1         1h30m ago    m1\n" +
		"showing the 1 oldest of 3; raise --limit to see more\n"
	if b.String() != want {
		t.Errorf("list:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	WriteMissing(&b, []command.Missing{{Key: "a", State: command.StateUnknown}, {Key: "b", State: "purged"}, {Key: "c", State: "synced"}}, "already purged")
	want = "not found: a (this agent holds no such movement)\nnot found: b (already purged)\nnot found: c (not quarantined: it is synced)\n"
	if b.String() != want {
		t.Errorf("missing:\n%s\nwant:\n%s", b.String(), want)
	}
	if got := NotQuarantined(2, 0, "redriven"); got != "2 key(s) were not quarantined (see above); none redriven" {
		t.Errorf("got %q", got)
	}
}

func TestFilterFlags(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	f := FilterFlags{reason: "permanent", since: "24h", limit: 5}
	got, err := f.Filter(now)
	if err != nil || got.Reason != "permanent" || !got.Since.Equal(now.Add(-24*time.Hour)) || !got.Until.IsZero() || got.Limit != 5 {
		t.Errorf("got %+v, %v", got, err)
	}
	for _, bad := range []FilterFlags{{since: "yesterday"}, {until: "x"}, {limit: -1}} {
		if _, err := bad.Filter(now); ExitCode("t", err, &bytes.Buffer{}) != ExitUsage {
			t.Errorf("%+v: %v, want a usage error", bad, err)
		}
	}
}

func TestTallyAndNumbers(t *testing.T) {
	if got := Tally(map[string]int{"forked": 2, "bad_signature": 1}); got != "bad_signature 1, forked 2" {
		t.Errorf("Tally = %q", got)
	}
	if got := Tally(nil); got != "" {
		t.Errorf("Tally(nil) = %q", got)
	}
	if got := Numbers([]int64{10, 20}); got != "10, 20" {
		t.Errorf("Numbers = %q", got)
	}
	if got := Numbers([]uint64(nil)); got != "" {
		t.Errorf("Numbers(nil) = %q", got)
	}
}
