// Package progress draws a one-line progress bar on a terminal for long CLI
// operations, and stays silent when the output is not a terminal (scripts,
// pipes, --json), so output meant for programs is never mixed with it.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"
)

// Bar is a progress bar. The zero value and a nil *Bar draw nothing.
type Bar struct {
	w     io.Writer
	label string
	unit  string // what is counted, e.g. "movements"; Bytes for bytes
	total int
	done  int
	start time.Time
	last  time.Time
}

// Bytes is the unit of a bar that counts bytes: drawn as KiB, MiB, GiB.
const Bytes = "bytes"

// New returns a bar counting unit (e.g. "movements", or Bytes) drawing on
// w when w is a terminal, or nil.
func New(w io.Writer, label, unit string, total int) *Bar {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	now := time.Now()
	return &Bar{w: w, label: label, unit: unit, total: total, start: now}
}

// Add advances the bar by n.
func (b *Bar) Add(n int) {
	if b == nil {
		return
	}
	b.done += n
	if now := time.Now(); now.Sub(b.last) >= 100*time.Millisecond || b.done >= b.total {
		b.last = now
		b.draw()
	}
}

// Done finishes the line.
func (b *Bar) Done() {
	if b == nil {
		return
	}
	b.draw()
	fmt.Fprintln(b.w)
}

func (b *Bar) draw() {
	// Clear to the end of the line: the line may grow shorter.
	fmt.Fprintf(b.w, "\r%s\x1b[K", Line(b.label, b.unit, b.done, b.total, time.Since(b.start)))
}

// Line is the bar's text after elapsed with done of total counted in unit:
// the bar, the percentage, the counts with their unit, the rate and, once
// there is a rate, the time left (ETA).
func Line(label, unit string, done, total int, elapsed time.Duration) string {
	const width = 30
	frac := 1.0
	if total > 0 {
		frac = min(float64(done)/float64(total), 1)
	}
	fill := int(frac * width)
	secs := max(elapsed.Seconds(), 0.001)
	rate := float64(done) / secs
	var counts, speed string
	if unit == Bytes {
		counts = fmt.Sprintf("%s/%s", size(float64(done)), size(float64(total)))
		speed = size(rate) + "/s"
	} else {
		counts = fmt.Sprintf("%d/%d %s", done, total, unit)
		speed = fmt.Sprintf("%.0f/s", rate)
	}
	eta := ""
	switch {
	case done >= total && total > 0:
		eta = " done in " + round(elapsed)
	case done > 0 && total > done:
		eta = " ETA " + round(time.Duration(float64(total-done)/rate*float64(time.Second)))
	}
	return fmt.Sprintf("%s [%s%s] %3.0f%% %s (%s)%s", label, strings.Repeat("=", fill), strings.Repeat(" ", width-fill), frac*100, strings.TrimSpace(counts), speed, eta)
}

// size is n bytes in B, KiB, MiB or GiB.
func size(n float64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", n/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", n/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", n/(1<<10))
	}
	return fmt.Sprintf("%.0f B", n)
}

// round is d to a whole second, at least 1s, written as Go writes it.
func round(d time.Duration) string {
	return max(d.Round(time.Second), time.Second).String()
}

// Phases draws one bar per phase of a long operation that reports its
// progress as (phase, done, total), such as reading one stream after
// another: a new phase finishes the bar before it. A nil *Phases draws
// nothing; every method is safe on it.
type Phases struct {
	w     io.Writer
	unit  string
	bar   *Bar
	phase string
	drawn uint64
}

// NewPhases returns Phases counting unit drawing on w when w is a
// terminal, or nil.
func NewPhases(w io.Writer, unit string) *Phases {
	if New(w, "", unit, 0) == nil {
		return nil
	}
	return &Phases{w: w, unit: unit}
}

// Update moves the bar of phase to done of total.
func (p *Phases) Update(phase string, done, total uint64) {
	if p == nil {
		return
	}
	if phase != p.phase || p.bar == nil {
		p.bar.Done()
		p.bar, p.phase, p.drawn = New(p.w, phase, p.unit, int(total)), phase, 0
	}
	p.bar.Add(int(done - p.drawn))
	p.drawn = done
}

// Done finishes the last phase's line.
func (p *Phases) Done() {
	if p != nil {
		p.bar.Done()
	}
}
