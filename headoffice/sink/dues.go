package sink

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/rxedge/agent/movement"
)

// Periods the law gives for reporting a theft or loss of a controlled
// substance, from the day it was discovered.
const (
	// Form106Days: DEA Form 106 within 45 calendar days (21 CFR 1301.76(b)).
	Form106Days = 45
	// CaliforniaLossDays and CaliforniaTheftDays: a report to the
	// California Board of Pharmacy within 30 days of discovering a loss,
	// 14 where it was theft, diversion or self-use (16 CCR 1715.65, 1715.6).
	CaliforniaLossDays  = 30
	CaliforniaTheftDays = 14
)

// Form106Dues are the due dates of the notices of one theft or loss
// discovered on a day (a date in UTC: the archive keeps instants).
type Form106Dues struct {
	// WrittenNotice is the written notice to the DEA Field Division:
	// within one business day of discovery (21 CFR 1301.76(b)), so the
	// next day that is neither a weekend day nor a federal holiday.
	WrittenNotice time.Time
	// Form106 is DEA Form 106: within 45 days of discovery.
	Form106 time.Time
	// California is the report to the California Board of Pharmacy,
	// for a pharmacy there: 14 days for a theft, 30 for a loss.
	California time.Time
}

// DuesOf are the due dates of a theft (reason theft) or loss discovered
// at t.
func DuesOf(t time.Time, reason string) Form106Dues {
	d := day(t)
	ca := CaliforniaLossDays
	if reason == movement.ReasonTheft {
		ca = CaliforniaTheftDays
	}
	return Form106Dues{
		WrittenNotice: NextBusinessDay(d),
		Form106:       d.AddDate(0, 0, Form106Days),
		California:    d.AddDate(0, 0, ca),
	}
}

// day is t's date in UTC, at midnight.
func day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// NextBusinessDay is the first day after d that is neither a Saturday, a
// Sunday nor a US federal holiday (5 U.S.C. 6103, as observed).
func NextBusinessDay(d time.Time) time.Time {
	d = day(d).AddDate(0, 0, 1)
	for d.Weekday() == time.Saturday || d.Weekday() == time.Sunday || FederalHoliday(d) {
		d = d.AddDate(0, 0, 1)
	}
	return d
}

// FederalHoliday reports whether d (a date) is a US federal holiday as
// federal offices observe it: a fixed-date holiday on a Saturday is
// observed the Friday before, on a Sunday the Monday after.
func FederalHoliday(d time.Time) bool {
	d = day(d)
	for _, y := range []int{d.Year(), d.Year() + 1} { // 1 January of next year may be observed on 31 December
		for _, h := range holidays(y) {
			if h.Equal(d) {
				return true
			}
		}
	}
	return false
}

// holidays are the federal holidays of year y, as observed.
func holidays(y int) []time.Time {
	date := func(m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }
	observed := func(t time.Time) time.Time {
		switch t.Weekday() {
		case time.Saturday:
			return t.AddDate(0, 0, -1)
		case time.Sunday:
			return t.AddDate(0, 0, 1)
		}
		return t
	}
	// nth is the nth weekday wd of month m (n = -1: the last).
	nth := func(m time.Month, wd time.Weekday, n int) time.Time {
		if n < 0 {
			t := date(m+1, 1).AddDate(0, 0, -1)
			for t.Weekday() != wd {
				t = t.AddDate(0, 0, -1)
			}
			return t
		}
		t := date(m, 1)
		for t.Weekday() != wd {
			t = t.AddDate(0, 0, 1)
		}
		return t.AddDate(0, 0, 7*(n-1))
	}
	return []time.Time{
		observed(date(time.January, 1)),
		nth(time.January, time.Monday, 3),  // Martin Luther King Jr.'s birthday
		nth(time.February, time.Monday, 3), // Washington's birthday
		nth(time.May, time.Monday, -1),     // Memorial Day
		observed(date(time.June, 19)),      // Juneteenth
		observed(date(time.July, 4)),
		nth(time.September, time.Monday, 1),  // Labor Day
		nth(time.October, time.Monday, 2),    // Columbus Day
		observed(date(time.November, 11)),    // Veterans Day
		nth(time.November, time.Thursday, 4), // Thanksgiving
		observed(date(time.December, 25)),
	}
}

// addForm106Dues adds to the rows of the form-106 report the due dates
// of their notices.
func addForm106Dues(t *Table) error {
	at, reason := slices.Index(t.Columns, "discovered_at"), slices.Index(t.Columns, "reason")
	if at < 0 || reason < 0 {
		return fmt.Errorf("the report has no discovered_at or reason")
	}
	t.Columns = append(t.Columns, "written_notice_due", "form_106_due", "california_report_due")
	for i, r := range t.Rows {
		when, err := time.Parse(time.RFC3339Nano, r[at])
		if err != nil {
			return fmt.Errorf("row %d: discovered_at: %w", i, err)
		}
		d := DuesOf(when, r[reason])
		t.Rows[i] = append(r, d.WrittenNotice.Format(time.DateOnly), d.Form106.Format(time.DateOnly), d.California.Format(time.DateOnly))
	}
	return nil
}

// addReconciliationDues adds to the rows of the reconciliation report
// the day a loss the count found must be reported to the California
// Board of Pharmacy by (30 days; a theft found in the investigation that
// follows has 14 from its discovery, and a movement of its own), and the
// blank lines 1715.65(e) asks to be signed: by whoever counted, and
// countersigned by the pharmacist-in-charge.
func addReconciliationDues(t *Table) error {
	at, v := slices.Index(t.Columns, "counted_at"), slices.Index(t.Columns, "variance")
	if at < 0 || v < 0 {
		return fmt.Errorf("the report has no counted_at or variance")
	}
	t.Columns = append(t.Columns, "california_loss_report_due", "counted_by", "pic_countersigned")
	for i, r := range t.Rows {
		due := ""
		if f, err := strconv.ParseFloat(r[v], 64); err == nil && f < 0 {
			when, err := time.Parse(time.RFC3339Nano, r[at])
			if err != nil {
				return fmt.Errorf("row %d: counted_at: %w", i, err)
			}
			due = day(when).AddDate(0, 0, CaliforniaLossDays).Format(time.DateOnly)
		}
		t.Rows[i] = append(r, due, "", "")
	}
	return nil
}

// QuarterBounds is the period of a calendar quarter written as 2026Q1 (or
// 2026-Q1), for the reconciliation report's --from and --to: [from, to)
// in UTC.
func QuarterBounds(s string) (from, to time.Time, err error) {
	if len(s) == 7 && s[4] == '-' {
		s = s[:4] + s[5:]
	}
	y, yerr := strconv.Atoi(s[:min(4, len(s))])
	if len(s) != 6 || yerr != nil || y < 2000 || y > 9999 || s[4] != 'Q' || s[5] < '1' || s[5] > '4' {
		return from, to, fmt.Errorf("sink: a quarter is written as 2026Q1 (Q1 to Q4)")
	}
	from = time.Date(y, time.Month(3*int(s[5]-'1')+1), 1, 0, 0, 0, 0, time.UTC)
	return from, from.AddDate(0, 3, 0), nil
}
