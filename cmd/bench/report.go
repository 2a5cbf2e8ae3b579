package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	stdsync "sync"
	"time"
)

// target is a figure's goal: op is "<=", "<" or ">=".
type target struct {
	op    string
	limit float64
}

func atLeast(v float64) *target { return &target{">=", v} }
func atMost(v float64) *target  { return &target{"<=", v} }
func below(v float64) *target   { return &target{"<", v} }

func (t *target) met(v float64) bool {
	switch t.op {
	case ">=":
		return v >= t.limit
	case "<":
		return v < t.limit
	}
	return v <= t.limit
}

func (t *target) String() string {
	op := map[string]string{">=": "≥", "<=": "≤", "<": "<"}[t.op]
	return op + " " + strconv.FormatFloat(t.limit, 'g', -1, 64)
}

// figure is one measured (or not measured) number.
type figure struct {
	scenario string
	name     string // the JSON name
	what     string // what was measured
	value    float64
	unit     string // "x" for a ratio
	baseline string // what a ratio is taken against, with its value
	target   *target
	missing  string // why it was not measured
}

func (f *figure) ratio() bool { return f.unit == "x" }

// report collects the figures of a run. Its methods are safe for
// concurrent use.
type report struct {
	mu        stdsync.Mutex
	mode      string
	scenarios []string
	figures   []*figure
	notes     []string
	durations []scenarioTime
	runtime   time.Duration
}

type scenarioTime struct {
	name string
	d    time.Duration
}

func newReport() *report { return &report{} }

func (r *report) add(f *figure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.figures = append(r.figures, f)
}

// ratio records a ratio against a baseline of the same run.
func (r *report) ratio(scenario, name, what string, v float64, baseline string, t *target) {
	r.add(&figure{scenario: scenario, name: name, what: what, value: v, unit: "x", baseline: baseline, target: t})
}

// value records an absolute figure.
func (r *report) value(scenario, name, what string, v float64, unit string, t *target) {
	r.add(&figure{scenario: scenario, name: name, what: what, value: v, unit: unit, target: t})
}

// missing records a figure that was not measured, and why.
func (r *report) missing(scenario, name, what string, t *target, why string) {
	r.add(&figure{scenario: scenario, name: name, what: what, target: t, missing: why})
}

func (r *report) note(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, s)
}

// writeMarkdown writes the header, the table and the notes.
func (r *report) writeMarkdown(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(w, "## RxEdge bench — %s run\n\n", r.mode)
	if r.mode == "quick" {
		fmt.Fprintf(w, "Quick run: CI smoke sizes. Figures named for sizes a quick run does not reach (the `1m` ones) are not measured; the 100k figures stand in as supporting figures under their own names.\n\n")
	}
	fmt.Fprintf(w, "Machine: %s. Scenarios: %s. Runtime: %s", environment(), strings.Join(r.scenarios, ", "), r.runtime.Round(time.Second))
	if len(r.durations) > 0 {
		var parts []string
		for _, d := range r.durations {
			parts = append(parts, fmt.Sprintf("%s %s", d.name, d.d.Round(time.Second)))
		}
		fmt.Fprintf(w, " (%s)", strings.Join(parts, ", "))
	}
	fmt.Fprint(w, ".\n\n")
	fmt.Fprintln(w, "| scenario | figure | baseline | ratio | target | met? |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, f := range r.figures {
		fig := fmt.Sprintf("%s `%s`", f.what, f.name)
		ratio, tgt, met := "—", "—", "—"
		switch {
		case f.missing != "":
			fig += ": not measured (" + f.missing + ")"
			met = "not measured"
		case f.ratio():
			ratio = formatRatio(f.value)
		default:
			fig += ": " + formatValue(f.value, f.unit)
		}
		if f.target != nil {
			tgt = f.target.String()
			if f.unit != "x" && f.unit != "" {
				tgt += " " + f.unit
			}
			if f.missing == "" {
				met = "yes"
				if !f.target.met(f.value) {
					met = "**no**"
				}
			}
		}
		base := f.baseline
		if base == "" {
			base = "—"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", f.scenario, cell(fig), cell(base), ratio, tgt, met)
	}
	if len(r.notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range r.notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
}

func cell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

// jsonReport is the -json document.
type jsonReport struct {
	Mode        string                `json:"mode"`
	Machine     string                `json:"machine"`
	Scenarios   []string              `json:"scenarios"`
	RuntimeS    float64               `json:"runtime_s"`
	Figures     map[string]float64    `json:"figures"`
	Targets     map[string]jsonTarget `json:"targets"`
	NotMeasured map[string]string     `json:"not_measured,omitempty"`
	Notes       []string              `json:"notes,omitempty"`
}

type jsonTarget struct {
	Target string `json:"target"`
	Met    *bool  `json:"met"` // null when not measured
}

func (r *report) json() jsonReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := jsonReport{
		Mode: r.mode, Machine: environment(), Scenarios: r.scenarios,
		RuntimeS: math.Round(r.runtime.Seconds()*10) / 10,
		Figures:  make(map[string]float64), Targets: make(map[string]jsonTarget),
		Notes: r.notes,
	}
	for _, f := range r.figures {
		if f.missing != "" {
			if out.NotMeasured == nil {
				out.NotMeasured = make(map[string]string)
			}
			out.NotMeasured[f.name] = f.missing
		} else {
			out.Figures[f.name] = round4(f.value)
		}
		if f.target != nil {
			t := jsonTarget{Target: f.target.op + " " + strconv.FormatFloat(f.target.limit, 'g', -1, 64)}
			if f.missing == "" {
				met := f.target.met(f.value)
				t.Met = &met
			}
			out.Targets[f.name] = t
		}
	}
	return out
}

// round4 keeps four significant digits.
func round4(v float64) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	s := strconv.FormatFloat(v, 'g', 4, 64)
	r, _ := strconv.ParseFloat(s, 64)
	return r
}

func formatRatio(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f×", v)
	case v >= 10:
		return fmt.Sprintf("%.1f×", v)
	}
	return fmt.Sprintf("%.2f×", v)
}

func formatValue(v float64, unit string) string {
	switch unit {
	case "mov/s", "msg/s", "msgs":
		return thousands(v) + " " + unit
	case "":
		return strconv.FormatFloat(round4(v), 'g', -1, 64)
	}
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f %s", v, unit)
	case v >= 10:
		return fmt.Sprintf("%.1f %s", v, unit)
	case v >= 0.1:
		return fmt.Sprintf("%.2f %s", v, unit)
	}
	return fmt.Sprintf("%.3f %s", v, unit)
}

// thousands formats a count with thousands separators.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// rate is movements per second.
func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return math.Inf(1)
	}
	return float64(n) / d.Seconds()
}

// quantile is the q-quantile (0..1) of ds, by the nearest-rank method. It
// sorts ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sizeLabel names a size in figure names: 10k, 100k, 1m.
func sizeLabel(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dm", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}
