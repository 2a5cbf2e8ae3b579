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
	total int
	done  int
	start time.Time
	last  time.Time
}

// New returns a bar drawing on w when w is a terminal, or nil.
func New(w io.Writer, label string, total int) *Bar {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	now := time.Now()
	return &Bar{w: w, label: label, total: total, start: now}
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
	const width = 30
	frac := 1.0
	if b.total > 0 {
		frac = min(float64(b.done)/float64(b.total), 1)
	}
	fill := int(frac * width)
	rate := float64(b.done) / max(time.Since(b.start).Seconds(), 0.001)
	fmt.Fprintf(b.w, "\r%s [%s%s] %3.0f%% %d/%d (%.0f/s)", b.label, strings.Repeat("=", fill), strings.Repeat(" ", width-fill), frac*100, b.done, b.total, rate)
}

// Phases draws one bar per phase of a long operation that reports its
// progress as (phase, done, total), such as reading one stream after
// another: a new phase finishes the bar before it. A nil *Phases draws
// nothing; every method is safe on it.
type Phases struct {
	w     io.Writer
	bar   *Bar
	phase string
	drawn uint64
}

// NewPhases returns Phases drawing on w when w is a terminal, or nil.
func NewPhases(w io.Writer) *Phases {
	if New(w, "", 0) == nil {
		return nil
	}
	return &Phases{w: w}
}

// Update moves the bar of phase to done of total.
func (p *Phases) Update(phase string, done, total uint64) {
	if p == nil {
		return
	}
	if phase != p.phase || p.bar == nil {
		p.bar.Done()
		p.bar, p.phase, p.drawn = New(p.w, phase, int(total)), phase, 0
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
