package sync

import (
	"fmt"
	"time"

	"github.com/rxedge/agent/retry"
	"github.com/rxedge/agent/status"
)

// This file holds the decisions of the sender; sender.go and settle.go
// gather the evidence and carry the verdicts out. Neither type here does
// any I/O: every method takes what happened (and now, and a random number
// where a delay is drawn) and returns what to do.

// Connection states of the sender. resuming is "connected, waiting out the
// resume jitter"; it is reported as offline.
const (
	stOffline int32 = iota
	stResuming
	stOnline
	stPaused
)

func stateName(st int32) string {
	switch st {
	case stOnline:
		return status.Online
	case stPaused:
		return status.Paused
	}
	return status.Offline
}

// pacing is the sender loop's state and probe schedule. Offline, nothing
// is sent. A connection starts a random wait of up to the resume jitter
// (P5), then the loop is online. A systemic failure pauses it: nothing is
// charged (P4), and it probes with full-jitter backoff capped by the probe
// policy; the first probe that reaches central resumes it.
type pacing struct {
	probe        retry.Policy
	resumeJitter time.Duration

	state    int32
	reason   string
	resumeAt time.Time // resuming: when to go online
	probeAt  time.Time // paused: when to probe next
	attempt  int       // paused: probes that failed since the pause
	probeOut bool      // paused: a probe is in the air
	// resumedAt is when the loop last resumed from a pause. A pause that
	// follows within the probe policy's cap is the same trouble (central
	// answers a probe but fails the movements): the backoff goes on
	// growing instead of starting over, so the loop cannot flap faster
	// than the cap allows.
	resumedAt time.Time
}

// step is what the loop should do now.
type step int

const (
	stepWait   step = iota // nothing: wait for an event or nextWake
	stepResume             // the resume jitter is over: go online
	stepProbe              // send a probe
	stepFill               // online: fill the window
)

// connected: a connection is up. From offline, the loop resumes after a
// random wait.
func (p *pacing) connected(now time.Time, rnd float64) {
	if p.state == stOffline {
		p.resumeAt = now.Add(time.Duration(rnd * float64(p.resumeJitter)))
		p.set(stResuming, "connected; resuming after a random wait of up to sync.resume_jitter")
	}
}

// disconnected: the connection is down; a probe in the air is lost with it.
func (p *pacing) disconnected(reason string) {
	p.probeOut = false
	p.set(stOffline, reason)
}

// systemic: the settler found that central cannot take anything. Only an
// online loop pauses: offline or resuming it sends nothing anyway, and a
// paused one is already probing.
func (p *pacing) systemic(now time.Time, rnd float64, reason string) (paused bool) {
	if p.state != stOnline {
		return false
	}
	return p.pause(now, rnd, reason)
}

// pause stops sending until a probe succeeds. Paused again while paused,
// it keeps its backoff and takes the new reason. It reports whether the
// loop was not paused before.
func (p *pacing) pause(now time.Time, rnd float64, reason string) (paused bool) {
	paused = p.state != stPaused
	if paused && (p.resumedAt.IsZero() || now.Sub(p.resumedAt) >= p.probe.MaxDelay) {
		p.attempt = 0
	}
	p.probeAt = now.Add(p.probe.Delay(p.attempt, rnd))
	p.set(stPaused, reason)
	return paused
}

// probed: the probe in the air settled; ok when it reached central. It
// reports whether the loop resumed.
func (p *pacing) probed(now time.Time, rnd float64, ok bool) (resumed bool) {
	p.probeOut = false
	if p.state != stPaused {
		return false
	}
	if ok {
		p.attempt++
		p.resumedAt = now
		p.set(stOnline, "")
		return true
	}
	p.attempt++
	p.probeAt = now.Add(p.probe.Delay(p.attempt, rnd))
	return false
}

// probing: a probe was sent.
func (p *pacing) probing() { p.probeOut = true }

// resume goes online: the resume jitter is over, or nothing is due to
// probe with and the next publish will tell.
func (p *pacing) resume() {
	p.set(stOnline, "")
}

// next is what to do at now.
func (p *pacing) next(now time.Time) step {
	switch p.state {
	case stResuming:
		if !now.Before(p.resumeAt) {
			return stepResume
		}
	case stPaused:
		if !p.probeOut && !now.Before(p.probeAt) {
			return stepProbe
		}
	case stOnline:
		return stepFill
	}
	return stepWait
}

// wake is how long the loop may wait before next has something new to
// say (-1: until an event). Online, the queue decides instead.
func (p *pacing) wake(now time.Time) time.Duration {
	switch p.state {
	case stResuming:
		return max(p.resumeAt.Sub(now), 0)
	case stPaused:
		if p.probeOut {
			return -1
		}
		return max(p.probeAt.Sub(now), 0)
	}
	return -1
}

func (p *pacing) set(st int32, reason string) { p.state, p.reason = st, reason }

// blame is the settler's evidence: it decides whether a failed attempt is
// the movement's own, and so charged, or central's, and so not (P4). The
// rules, in the order they are applied to each outcome:
//
//  1. Stored or already stored: synced (P2: only central's acknowledgement
//     or its stored copy moves a movement to synced). It also proves that
//     central was storing for this store after every failure held before
//     it: those are charged.
//  2. Permanent (too large, conflict): quarantined at once.
//  3. Offline (not connected, shutting down): given back uncharged.
//  4. Systemic (stream full, no permission, no stream, central
//     unavailable): the sender pauses; this movement and every held
//     failure go back uncharged.
//  5. "In process" (10158, 10164): retried soon and uncharged, at most
//     inProcessMax times in a row for one movement; after that it is a
//     failure like any other (rule 6). Nothing loops for ever (P5).
//  6. Any other failure while online is held. It is charged when central
//     shows it is alive for this store: a later movement is stored (rule
//     1), or central answered each held failure (an API error about that
//     movement) and nothing else arrived for an attempt timeout, or
//     central answered the liveness probe the settler sends when a held
//     failure was not answered (a timeout, "no responders"). If the probe
//     is not answered either, central is down for this store: the sender
//     pauses and the held failures go back uncharged.
//  7. systemicAfter failures held in a row, with no success between, are
//     central's problem however they look: the sender pauses and they go
//     back uncharged.
//  8. While not online, a failure goes back uncharged — except a probe's,
//     which is held so that the liveness probe decides (rule 6): a
//     movement central never answers for is charged on a quiet store too,
//     while central is alive, and never while it is not.
//
// Batches (batchStep): a batch refused without naming a member is resent
// one member at a time, so that each member's own outcome goes through
// the rules above and one poison movement cannot hold back the others.
type blame struct {
	systemicAfter int
	inProcessMax  int

	held        []outcome      // failures awaiting evidence, in send order
	consecutive int            // failures held in a row with no success since
	inProcess   map[uint64]int // uncharged "in process" retries in a row, by movement
}

// ruling is what becomes of settled outcomes.
type ruling struct {
	acks       []outcome // synced
	quarantine []outcome // permanent: quarantined, charged
	charge     []outcome // an attempt each: retried later, or quarantined when exhausted
	soon       []outcome // retried soon, uncharged
	release    []outcome // given back unchanged
	// pause, when set, is why the sender must pause; cause is the error
	// behind it.
	pause string
	cause error
	// suspects are movements not to probe with while others are due.
	suspects []uint64
	// ask: a held failure may be central's silence; the settler should
	// ask central whether it is alive for this store (blame.alive), unless
	// more evidence is on its way.
	ask bool
	// probe: a probe was among the outcomes; probeOK: it reached central.
	probe, probeOK bool
}

func newBlame(systemicAfter, inProcessMax int) *blame {
	return &blame{systemicAfter: systemicAfter, inProcessMax: inProcessMax, inProcess: make(map[uint64]int)}
}

// settle judges a group of outcomes in send order; online is the loop's
// state when they settled.
func (b *blame) settle(outs []outcome, online bool) ruling {
	r := ruling{acks: make([]outcome, 0, len(outs))}
	for _, o := range outs {
		b.see(&r, o, online)
	}
	r.ask = b.unanswered()
	return r
}

func (b *blame) see(r *ruling, o outcome, online bool) {
	v := o.v
	if o.probe {
		// The probe reached central if central stored it or answered
		// about it; a systemic answer (stream full) is no way through.
		r.probe = true
		switch v.outcome {
		case retry.Stored, retry.AlreadyStored, retry.ItemPermanent:
			r.probeOK = true
		case retry.ItemTransient:
			r.probeOK = r.probeOK || v.answered
		}
	}
	if !v.soon {
		delete(b.inProcess, o.rec.Seq)
	}
	switch v.outcome {
	case retry.Stored, retry.AlreadyStored:
		r.acks = append(r.acks, o)
		r.charge = append(r.charge, b.held...)
		b.held, b.consecutive = nil, 0
		return
	case retry.ItemPermanent:
		r.quarantine = append(r.quarantine, o)
		return
	case retry.Systemic:
		r.pause, r.cause = v.kind, o.err
		if o.text != "" {
			r.pause += ": " + o.text
		}
		r.release = append(append(r.release, o), b.held...)
		b.held, b.consecutive = nil, 0
		return
	case retry.ItemTransient:
	default: // Offline
		r.release = append(r.release, o)
		return
	}
	if v.soon {
		if n := b.inProcess[o.rec.Seq] + 1; n <= b.inProcessMax {
			b.inProcess[o.rec.Seq] = n
			r.soon = append(r.soon, o)
			return
		}
		delete(b.inProcess, o.rec.Seq)
	}
	switch {
	case o.probe:
		if v.answered {
			// Central answered: the loop resumes and the movement is
			// tried again with the others.
			r.release = append(r.release, o)
			return
		}
		b.held = append(b.held, o)
	case !online:
		r.release = append(r.release, o)
	default:
		b.held = append(b.held, o)
		b.consecutive++
		if b.consecutive >= b.systemicAfter {
			r.pause = fmt.Sprintf("systemic:consecutive_failures: %d movements failed in a row (last: %s)", b.consecutive, v.kind)
			r.cause = o.err
			r.suspects = append(r.suspects, seqs(b.held)...)
			r.release = append(r.release, b.held...)
			b.held, b.consecutive = nil, 0
		}
	}
}

// quiet: nothing more arrived for an attempt timeout while failures were
// held. If central answered each of them, it is alive and they are
// charged; otherwise the settler must ask (ruling.ask).
func (b *blame) quiet() ruling {
	if b.unanswered() {
		return ruling{ask: true}
	}
	r := ruling{charge: b.held}
	b.held = nil
	return r
}

// alive: central answered the liveness probe (err nil), or did not (err).
// Answered, the held failures were the movements' own and are charged;
// not answered, central is down for this store: pause, charge nothing.
func (b *blame) alive(err error) ruling {
	var r ruling
	for _, h := range b.held {
		r.probe = r.probe || h.probe
	}
	if err == nil {
		r.probeOK = r.probe
		r.charge = b.held
		b.held, b.consecutive = nil, 0
		return r
	}
	if len(b.held) > 0 {
		r.pause = fmt.Sprintf("systemic:unresponsive: central answered neither %d movement(s) (last: %s) nor a probe (%s)",
			len(b.held), b.held[len(b.held)-1].v.kind, err)
		r.cause = err
	}
	r.suspects = seqs(b.held)
	r.release = b.held
	b.held, b.consecutive = nil, 0
	return r
}

// drop gives every held failure back (the settler is stopping).
func (b *blame) drop() []outcome {
	h := b.held
	b.held, b.consecutive = nil, 0
	return h
}

// unanswered reports whether a held failure is one central did not answer.
func (b *blame) unanswered() bool {
	for _, h := range b.held {
		if !h.v.answered {
			return true
		}
	}
	return false
}

// batchStep is what to do with the members of an atomic batch that failed.
type batchStep int

const (
	batchRelease batchStep = iota // give them back uncharged
	batchPause                    // systemic: pause, give them back uncharged
	batchSingly                   // send each alone now; each outcome is judged by blame
	batchAsk                      // ask central whether it is alive: if so singly, if not pause
)

// splitBatch decides on a failed batch from its verdict. A batch is one
// failure, never len(batch) charges: either the failure is central's, or
// the members are sent one at a time so that the failing one shows.
func splitBatch(v verdict) batchStep {
	switch {
	case v.outcome == retry.Offline, v.noBatch:
		return batchRelease
	case v.outcome == retry.Systemic:
		return batchPause
	case !v.answered && v.outcome == retry.ItemTransient:
		// No answer at all (a timeout, "no responders"): a member may be
		// one central never answers for, or central may be down.
		return batchAsk
	}
	// Central answered about the batch without naming a member: some
	// member is already stored, too large, in process, or never arrived
	// (incomplete).
	return batchSingly
}

func seqs(outs []outcome) []uint64 {
	s := make([]uint64, len(outs))
	for i, o := range outs {
		s[i] = o.rec.Seq
	}
	return s
}

// diagnosis is why the agent cannot reach or use central, and which of
// its changes are logged. Failures with an unchanged reason (every retry
// of a refused connection) are never logged. A change of reason is, but
// the same reason at most once per logEvery: a connection flapping
// between two reasons cannot flood the log, and the next line logged
// counts the changes left out. A timeout does not replace a refused
// permission: central never answers a publish it denies, so the denial
// explains the timeouts that follow it.
type diagnosis struct {
	logEvery time.Duration

	cur      *status.ConnProblem
	logged   map[string]time.Time // when each reason was last logged
	unlogged int                  // changes not logged since the last line
}

// see records a failure with a reason (one of status.ConnReasons) at now.
// It reports whether to log the problem, and how many changes went
// unlogged before it.
func (d *diagnosis) see(now time.Time, reason, detail, server string) (log bool, unlogged int) {
	if d.cur != nil && d.cur.Reason == reason {
		d.cur.Detail, d.cur.Server = detail, server
		return false, 0
	}
	if d.cur != nil && d.cur.Reason == status.ReasonAuthorization && reason == status.ReasonTimeout {
		return false, 0
	}
	since := now.UTC()
	d.cur = &status.ConnProblem{Reason: reason, Detail: detail, Server: server, Since: &since}
	if last, ok := d.logged[reason]; ok && now.Sub(last) < d.logEvery {
		d.unlogged++
		return false, 0
	}
	if d.logged == nil {
		d.logged = make(map[string]time.Time)
	}
	d.logged[reason] = now
	unlogged, d.unlogged = d.unlogged, 0
	return true, unlogged
}

// clear: central is reachable and usable. It reports whether there was a
// problem.
func (d *diagnosis) clear() bool {
	was := d.cur != nil
	d.cur = nil
	return was
}

// problem is the current problem (nil when none), a copy.
func (d *diagnosis) problem() *status.ConnProblem {
	if d.cur == nil {
		return nil
	}
	p := *d.cur
	return &p
}
