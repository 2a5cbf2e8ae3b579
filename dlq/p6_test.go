package dlq

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/rxedge/agent/queue"
)

// TestNoPatientDataOutsideThePayload checks DESIGN P6: a marker in rx_ref
// and note appears in Show with its payload flag and in exports, and in
// nothing else the package answers, returns as an error, or journals. The
// local API's answers are checked in package control.
func TestNoPatientDataOutsideThePayload(t *testing.T) {
	const marker = "PATIENT-MARKER-7731"
	f := newFixture(t)
	keys := f.quarantine(t,
		spec{id: "A", rxRef: "RX-" + marker, note: "for " + marker, schedule: "CII"},
		spec{id: "B", rxRef: "RX-" + marker + "-2"},
		spec{id: "C", note: marker},
	)
	ctx := context.Background()

	var seen []string // everything that must not hold the marker
	add := func(what string, v any) {
		t.Helper()
		s, ok := v.(string)
		if !ok {
			s = mustJSON(t, v)
		}
		seen = append(seen, what+": "+s)
	}
	addErr := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		add(what, err.Error())
	}

	list, err := f.svc.List(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	add("list", list)
	d, err := f.svc.Show(keys[0], false, "local:test")
	if err != nil {
		t.Fatal(err)
	}
	add("show", d)

	dry, err := f.svc.Redrive(ctx, RedriveRequest{Selection: Selection{All: true}, ReasonText: "dry", DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	add("dry run", dry)
	rr, err := f.svc.Redrive(ctx, RedriveRequest{Selection: Selection{Keys: keys[1:2]}, ReasonText: "retry"})
	if err != nil {
		t.Fatal(err)
	}
	add("redrive", rr)
	_, err = f.svc.Show(keys[1], true, "local:test")
	addErr("show of a redriven key", err)
	_, err = f.svc.Redrive(ctx, RedriveRequest{Selection: Selection{Keys: []string{keys[0], "not-a-key"}}, ReasonText: "x"})
	addErr("redrive with a bad key", err)

	// Positive controls: the payload is there when asked for.
	withPayload, err := f.svc.Show(keys[0], true, "local:test")
	if err != nil || !strings.Contains(string(withPayload.Payload), marker) {
		t.Fatalf("show with payload lacks the marker: %s, %v", withPayload.Payload, err)
	}
	var export bytes.Buffer
	if _, err := f.svc.Export(ctx, &export, ExportRequest{Actor: "local:test"}); err != nil || !strings.Contains(export.String(), marker) {
		t.Fatalf("export lacks the marker: %v", err)
	}

	pr, err := f.svc.Purge(ctx, PurgeRequest{Keys: []string{keys[0], keys[2]}, ReasonText: "duplicates", Confirm: true})
	if err != nil {
		t.Fatal(err)
	}
	add("purge", pr)
	if data, err := os.ReadFile(pr.ExportFile); err != nil || !bytes.Contains(data, []byte(marker)) {
		t.Fatalf("purge export file lacks the marker: %v", err)
	}
	_, err = f.svc.Purge(ctx, PurgeRequest{Keys: keys[:1], ReasonText: "x"})
	addErr("unconfirmed purge", err)

	audit, err := f.svc.Audit(AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	add("audit", audit)
	// The journal as stored, whatever Audit filters.
	err = f.q.Events(f.clk.Now().AddDate(-10, 0, 0), func(e queue.Event) bool {
		b, _ := json.Marshal(e)
		add("journal", string(b))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}

	for _, s := range seen {
		if strings.Contains(s, marker) {
			t.Errorf("patient data outside the payload in %s", s)
		}
	}
}
