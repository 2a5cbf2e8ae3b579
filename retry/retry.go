// Package retry holds the retry policy of the agent: how many attempts a
// movement gets, how long to wait between them, and the kinds of outcome a
// delivery attempt can have. It uses only the standard library and has no
// state: every decision is a pure function of its arguments, so it is the
// same in tests as in production.
//
// Delays are full-jitter exponential (DESIGN P5): the delay after the
// attempt with zero-based index n is uniform in [0, min(MaxDelay,
// BaseDelay·2ⁿ)), so a fleet of agents that failed together spreads out
// instead of retrying in step.
package retry

import (
	"errors"
	"fmt"
	"time"
)

// Policy is the retry budget and delay schedule of one class of movement.
type Policy struct {
	MaxAttempts int           // movement-specific failures before quarantine
	BaseDelay   time.Duration // ceiling of the first delay
	MaxDelay    time.Duration // cap on every delay
}

// Defaults per class (DESIGN §6): controlled substances get more attempts.
var (
	Controlled = Policy{MaxAttempts: 7, BaseDelay: 500 * time.Millisecond, MaxDelay: 30 * time.Second}
	Ordinary   = Policy{MaxAttempts: 5, BaseDelay: 500 * time.Millisecond, MaxDelay: 30 * time.Second}
	// Probe paces the probes of a paused sender: no attempt budget, and a
	// cap of five minutes.
	Probe = Policy{BaseDelay: time.Second, MaxDelay: 5 * time.Minute}
)

// Or is p with each zero field taken from def: a configuration that sets
// only max_attempts keeps the default delays.
func (p Policy) Or(def Policy) Policy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = def.MaxAttempts
	}
	if p.BaseDelay == 0 {
		p.BaseDelay = def.BaseDelay
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = def.MaxDelay
	}
	return p
}

// Validate reports every problem with the policy at once.
func (p Policy) Validate() error {
	var errs []error
	if p.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("max_attempts must be at least 1 (got %d)", p.MaxAttempts))
	}
	if p.BaseDelay <= 0 {
		errs = append(errs, fmt.Errorf("base_delay must be positive (got %s)", p.BaseDelay))
	}
	if p.MaxDelay < p.BaseDelay {
		errs = append(errs, fmt.Errorf("max_delay (%s) must not be less than base_delay (%s)", p.MaxDelay, p.BaseDelay))
	}
	return errors.Join(errs...)
}

// Ceiling is the largest delay after the attempt with zero-based index
// attempt: min(MaxDelay, BaseDelay·2^attempt), without overflow for any
// attempt.
func (p Policy) Ceiling(attempt int) time.Duration {
	if attempt < 0 {
		attempt = 0
	}
	if p.BaseDelay <= 0 {
		return 0
	}
	// BaseDelay·2^attempt > MaxDelay  ⇔  BaseDelay > MaxDelay >> attempt.
	if attempt >= 63 || p.BaseDelay > p.MaxDelay>>uint(attempt) {
		return p.MaxDelay
	}
	return p.BaseDelay << uint(attempt)
}

// Delay is the full-jitter delay after the attempt with zero-based index
// attempt, given rnd uniform in [0, 1).
func (p Policy) Delay(attempt int, rnd float64) time.Duration {
	if rnd < 0 || rnd >= 1 {
		rnd = 0
	}
	return time.Duration(rnd * float64(p.Ceiling(attempt)))
}

// Exhausted reports whether a movement that has failed attempts times has
// used its budget.
func (p Policy) Exhausted(attempts int) bool { return attempts >= p.MaxAttempts }

// Outcome is what one delivery attempt of one movement came to.
type Outcome uint8

// Outcomes (DESIGN §5). Only failures of the movement itself, ItemTransient
// and ItemPermanent, may be charged to it; Systemic pauses the sender and
// Offline waits for the connection, and neither charges anything (DESIGN P4).
const (
	Stored        Outcome = iota + 1 // central acknowledged it
	AlreadyStored                    // central already holds it with the same digest
	ItemTransient                    // this movement failed, may succeed later
	ItemPermanent                    // this movement can never be stored
	Systemic                         // central cannot take anything: full, no permission, no stream
	Offline                          // not connected, or the outcome is unknown for everything
)

var outcomeNames = [...]string{Stored: "stored", AlreadyStored: "already_stored", ItemTransient: "item_transient", ItemPermanent: "item_permanent", Systemic: "systemic", Offline: "offline"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}
