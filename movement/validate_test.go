package movement

import (
	"errors"
	"testing"
	"time"
)

// TestFieldErrorKinds: a missing required field and a value outside a
// field's table carry their kind, for callers that answer in codes.
func TestFieldErrorKinds(t *testing.T) {
	m := Movement{MovementID: "m1", Type: "gift", Quantity: "1", Unit: "EA", OccurredAt: "2026-03-01T12:00:00Z"}
	es := m.Validate("S1", time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	kinds := map[string]error{}
	for _, e := range es {
		kinds[e.Field] = e.Kind
	}
	if !errors.Is(es[0], kinds[es[0].Field]) || kinds["ndc"] != ErrRequired || kinds["type"] != ErrNotAllowed {
		t.Errorf("kinds %v of %v, want ndc %v and type %v", kinds, es, ErrRequired, ErrNotAllowed)
	}
	for _, e := range es {
		if errors.Is(e, ErrRequired) != (e.Field == "ndc") {
			t.Errorf("%v: errors.Is(ErrRequired) %v", e, errors.Is(e, ErrRequired))
		}
	}
}
