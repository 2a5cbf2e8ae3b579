package doctor

import (
	"context"
	"strings"
	"testing"
)

// TestDurabilityCheck: without access to central's system account or
// monitoring the check is skipped (never passed); with it, it is what the
// check given says, under the check's name.
func TestDurabilityCheck(t *testing.T) {
	o := Options{}
	o.defaults()
	if c := durable(context.Background(), o, nil, ""); c.OK || !c.Skipped || !strings.Contains(c.Fix, "--system-user") {
		t.Errorf("without access: %+v", c)
	}
	o.Durability = func(context.Context, []string, string) Check { return Check{Warning: true, Detail: "R1"} }
	if c := durable(context.Background(), o, nil, ""); c.Name != CheckDurability || !c.Warning || c.Skipped {
		t.Errorf("with access: %+v", c)
	}
}
