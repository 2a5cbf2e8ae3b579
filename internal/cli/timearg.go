package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rxedge/agent/central/command"
)

// ParseTime reads a time an operator gives (--since, --until): an RFC 3339
// time ("2026-03-01T09:30:00Z"), a date ("2026-03-01", midnight UTC), or a
// duration meaning that long before now ("90m", "24h", "7d"). The error
// says which forms are accepted; callers add the flag or field.
func ParseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, errors.New("is empty: give an RFC 3339 time (2026-03-01T09:30:00Z), a date (2026-03-01) or a duration ago (24h, 7d)")
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if d, ok := parseAgo(s); ok {
		if d < 0 {
			return time.Time{}, fmt.Errorf("%q is a negative duration: give how long ago, e.g. 24h", command.Clip(s))
		}
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-03-01T09:30:00Z), a date (2026-03-01) nor a duration ago (24h, 7d)", command.Clip(s))
}

// parseAgo reads a Go duration, or a whole number of days ("7d").
func parseAgo(s string) (time.Duration, bool) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days > 100*365 || days < -100*365 {
			return 0, false
		}
		return time.Duration(days) * 24 * time.Hour, true
	}
	d, err := time.ParseDuration(s)
	return d, err == nil
}
