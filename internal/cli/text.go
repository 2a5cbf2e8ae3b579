package cli

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Age is a duration as an operator reads it: 45s, 12m, 3h05m, 4d07h.
func Age(d time.Duration) string {
	d = max(d, 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

// OneLine keeps operator text on its row of the table.
func OneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// TimeFlag parses the value v of the time flag --name (ParseTime); ""
// is no bound, and a value that does not parse is a usage error.
func TimeFlag(name, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := ParseTime(v, now)
	if err != nil {
		return t, UsageError("--%s: %v", name, err)
	}
	return t, nil
}

// Tally is counts by name as an operator reads them, names in order:
// "bad_signature 1, forked 2"; "" for none. Never a Go map.
func Tally(m map[string]int) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+" "+strconv.Itoa(m[k]))
	}
	return strings.Join(parts, ", ")
}

// Numbers is a list of numbers as an operator reads it: "10, 20"; "" for
// none. Never a Go slice.
func Numbers[T int | int64 | uint64](xs []T) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ", ")
}
