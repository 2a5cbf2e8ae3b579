package retry

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestCeilingGrowsAndCaps(t *testing.T) {
	p := Policy{MaxAttempts: 7, BaseDelay: 500 * time.Millisecond, MaxDelay: 30 * time.Second}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, w := range want {
		if got := p.Ceiling(i); got != w {
			t.Errorf("Ceiling(%d) = %s, want %s", i, got, w)
		}
	}
	for _, a := range []int{62, 63, 64, 1000, math.MaxInt} {
		if got := p.Ceiling(a); got != p.MaxDelay {
			t.Errorf("Ceiling(%d) = %s, want the cap %s (overflow guard)", a, got, p.MaxDelay)
		}
	}
	huge := Policy{BaseDelay: time.Duration(math.MaxInt64 / 2), MaxDelay: time.Duration(math.MaxInt64)}
	if got := huge.Ceiling(5); got != huge.MaxDelay {
		t.Errorf("huge base: Ceiling(5) = %s, want cap", got)
	}
	if got := p.Ceiling(-3); got != p.BaseDelay {
		t.Errorf("Ceiling(-3) = %s, want base", got)
	}
}

func TestDelayIsFullJitterWithinTheCeiling(t *testing.T) {
	p := Ordinary
	r := rand.New(rand.NewPCG(1, 2))
	for attempt := 0; attempt < 12; attempt++ {
		ceil := p.Ceiling(attempt)
		var sum time.Duration
		const n = 20000
		for i := 0; i < n; i++ {
			d := p.Delay(attempt, r.Float64())
			if d < 0 || d >= ceil {
				t.Fatalf("Delay(%d) = %s outside [0, %s)", attempt, d, ceil)
			}
			sum += d
		}
		mean := sum / n
		// Uniform on [0, ceil): mean ceil/2, within 2% for 20k samples.
		if diff := math.Abs(float64(mean) - float64(ceil)/2); diff > 0.02*float64(ceil) {
			t.Errorf("attempt %d: mean delay %s, want about %s", attempt, mean, ceil/2)
		}
	}
	if d := p.Delay(3, 0); d != 0 {
		t.Errorf("Delay with rnd 0 = %s", d)
	}
	if d := p.Delay(3, 1.5); d != 0 {
		t.Errorf("Delay with an out-of-range rnd = %s, want 0", d)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	err := Policy{MaxAttempts: 0, BaseDelay: 0, MaxDelay: -1}.Validate()
	if err == nil {
		t.Fatal("invalid policy accepted")
	}
	for _, want := range []string{"max_attempts", "base_delay", "max_delay"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	for _, p := range []Policy{Controlled, Ordinary} {
		if err := p.Validate(); err != nil {
			t.Errorf("default %+v: %v", p, err)
		}
	}
}

func TestOutcomes(t *testing.T) {
	if Offline.String() != "offline" || Outcome(99).String() != "outcome(99)" {
		t.Errorf("names: %s %s", Offline, Outcome(99))
	}
}

func ExamplePolicy_Delay() {
	p := Policy{MaxAttempts: 7, BaseDelay: 500 * time.Millisecond, MaxDelay: 30 * time.Second}
	for attempt := 0; attempt < 8; attempt++ {
		// With rnd = 0.5 the delay is half the ceiling.
		fmt.Println(attempt, p.Ceiling(attempt), p.Delay(attempt, 0.5))
	}
	// Output:
	// 0 500ms 250ms
	// 1 1s 500ms
	// 2 2s 1s
	// 3 4s 2s
	// 4 8s 4s
	// 5 16s 8s
	// 6 30s 15s
	// 7 30s 15s
}

func TestOrTakesZeroFieldsFromTheDefault(t *testing.T) {
	for _, tt := range []struct {
		name    string
		p, want Policy
	}{
		{"zero", Policy{}, Controlled},
		{"attempts only", Policy{MaxAttempts: 9}, Policy{MaxAttempts: 9, BaseDelay: Controlled.BaseDelay, MaxDelay: Controlled.MaxDelay}},
		{"all set", Policy{MaxAttempts: 2, BaseDelay: time.Second, MaxDelay: time.Minute}, Policy{MaxAttempts: 2, BaseDelay: time.Second, MaxDelay: time.Minute}},
		{"negative kept for Validate", Policy{MaxAttempts: -1}, Policy{MaxAttempts: -1, BaseDelay: Controlled.BaseDelay, MaxDelay: Controlled.MaxDelay}},
	} {
		if got := tt.p.Or(Controlled); got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
