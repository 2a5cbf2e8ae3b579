package cli

import (
	"testing"
	"time"
)

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Time
		bad  bool
	}{
		{in: "2026-03-01T09:30:00Z", want: time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC)},
		{in: "2026-03-01T09:30:00.5-05:00", want: time.Date(2026, 3, 1, 14, 30, 0, 5e8, time.UTC)},
		{in: "2026-03-01", want: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)},
		{in: "24h", want: now.Add(-24 * time.Hour)},
		{in: "90m", want: now.Add(-90 * time.Minute)},
		{in: "7d", want: now.Add(-7 * 24 * time.Hour)},
		{in: " 1h ", want: now.Add(-time.Hour)},
		{in: "", bad: true},
		{in: "yesterday", bad: true},
		{in: "-1h", bad: true},
		{in: "03/01/2026", bad: true},
		{in: "xd", bad: true},
	}
	for _, tt := range tests {
		got, err := ParseTime(tt.in, now)
		if tt.bad {
			if err == nil {
				t.Errorf("ParseTime(%q) = %v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || !got.Equal(tt.want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}
