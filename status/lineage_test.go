package status

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestLineageCheck: the start-up lineage check in the plain view, as
// problems, and in the JSON document: what was skipped (where and why,
// never what it said) and a file only an unverified record names.
func TestLineageCheck(t *testing.T) {
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	base := func(c *LineageCheck) *Status {
		return &Status{StoreID: "S0001", GeneratedAt: now, Agent: Agent{Running: true}, Connection: Connection{State: Online},
			DataFile: DataFile{Lineage: &FileLineage{FileID: "f1", Origin: "replaced", Base: 400, Confirmed: true, Check: c}}}
	}
	skipped := &LineageCheck{State: LineageDone, From: "summary", CentralHighest: 400, Skipped: 1,
		SkippedRecords: []SkippedRecord{{Where: "last_movement", Reason: "no_seq", Stream: "RX_MOVEMENTS", StreamSeq: 453}}}
	tests := []struct {
		name  string
		check *LineageCheck
		codes []string
		lines []string
	}{
		{"no check (stopped agent)", nil, nil, []string{"Lineage         file f1 (replaced), continues after sequence 400\n"}},
		{"waiting", &LineageCheck{State: LineageWaiting, Attempts: 3, Error: "lineage: read the last message central stored for S0001: nats: timeout"}, nil,
			[]string{"Lineage check   waiting for central's record (3 reads): lineage: read the last message central stored for S0001: nats: timeout\n"}},
		{"done", &LineageCheck{State: LineageDone, From: "summary", CentralHighest: 400}, nil,
			[]string{"Lineage check   done, from summary (central's highest 400)\n"}},
		{"skipped", skipped, []string{CodeLineageSkipped},
			[]string{"Lineage check   done, from summary (central's highest 400), 1 record(s) skipped: last movement: no seq, RX_MOVEMENTS #453\n",
				"at start the agent passed over 1 record(s) on central that the store did not write (last movement: no seq, RX_MOVEMENTS #453): someone else wrote on the store's subjects; it decided from the store's summary"}},
		{"skipped, nothing left", &LineageCheck{State: LineageDone, From: "none", Skipped: 1, SkippedRecords: []SkippedRecord{{Where: "last_movement", Reason: "reflected", Stream: "RX_MOVEMENTS", StreamSeq: 1}}},
			[]string{CodeLineageSkipped}, []string{"it found nothing it could take as the store's own and started as a new file would"}},
		{"unverified file", &LineageCheck{State: LineageDone, From: "movement", CentralHighest: 5, UnverifiedFile: "f2"}, []string{CodeFileUnverified},
			[]string{"central's last movement names data file f2, which this data file (f1) does not know"}},
		{"held", &LineageCheck{State: LineageHeld, From: "summary"}, nil, []string{"Lineage check   held: another data file gives the store's sequences\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base(tt.check)
			var got []string
			for _, p := range s.Judge(PlainThresholds(time.Hour)) {
				got = append(got, p.Code)
			}
			if strings.Join(got, ",") != strings.Join(tt.codes, ",") {
				t.Errorf("problems %v, want %v", got, tt.codes)
			}
			var b strings.Builder
			Render(&b, s, time.Hour)
			for _, l := range tt.lines {
				if !strings.Contains(b.String(), l) {
					t.Errorf("no %q in\n%s", l, b.String())
				}
			}
		})
	}
	b, _ := json.Marshal(base(skipped))
	if want := `"check":{"state":"done","from":"summary","central_highest":400,"skipped":1,"skipped_records":[{"where":"last_movement","reason":"no_seq","stream":"RX_MOVEMENTS","stream_seq":453}]}`; !strings.Contains(string(b), want) {
		t.Errorf("JSON %s lacks %s", b, want)
	}
}
