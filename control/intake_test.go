package control

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/queue"
)

// TestSubmitEachNamesItemsAsTheClientNumbersThem submits partial
// submissions in which items before a conflict are refused (invalid, too
// large, or conflicting themselves): every answer must name items by their
// place in the request, and the whole request is one commit.
func TestSubmitEachNamesItemsAsTheClientNumbersThem(t *testing.T) {
	const maxMov = 512
	big := mv("Z", 1)[:len(mv("Z", 1))-1] + `,"note":"` + strings.Repeat("x", maxMov) + `"}`
	tests := []struct {
		name  string
		held  []string // movements stored before the request
		items []string
		want  []string // per item: status, then what its error says
	}{
		{
			name:  "conflict after an invalid item",
			items: []string{`{"movement_id":"X"}`, mv("B", 1), mv("B", 2)},
			want:  []string{"rejected: is required", "accepted", "rejected: movement earlier in this submission (item 1)"},
		},
		{
			name:  "conflict after a movement too large",
			items: []string{big, mv("B", 1), mv("B", 2)},
			want:  []string{"rejected: more than the limit", "accepted", "rejected: movement earlier in this submission (item 1)"},
		},
		{
			name:  "conflict after a conflict with a held movement",
			held:  []string{mv("A", 1)},
			items: []string{mv("A", 2), mv("B", 1), mv("B", 2), mv("A", 1)},
			want:  []string{"rejected: pending movement", "accepted", "rejected: movement earlier in this submission (item 1)", "duplicate"},
		},
		{
			name:  "conflicts with a refused item are with the stored one",
			items: []string{mv("C", 1), `{"movement_id":"C"}`, mv("C", 2), mv("C", 2), mv("C", 1)},
			want:  []string{"accepted", "rejected: is required", "rejected: (item 0)", "rejected: (item 0)", "duplicate"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: store})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			if len(tt.held) > 0 {
				if _, err := submitEach(q, nil, toItems(tt.held), nil, maxMov, store, now); err != nil {
					t.Fatal(err)
				}
			}
			commits := q.Commits()
			res, err := submitEach(q, nil, toItems(tt.items), nil, maxMov, store, now)
			if err != nil {
				t.Fatal(err)
			}
			if n := q.Commits() - commits; n != 1 {
				t.Errorf("%d commits for one request, want 1", n)
			}
			b, _ := json.Marshal(res)
			if len(res) != len(tt.want) {
				t.Fatalf("got %d results, want %d\n%s", len(res), len(tt.want), b)
			}
			for i, r := range res {
				status, says, _ := strings.Cut(tt.want[i], ": ")
				if r.Item != i || r.Status != status {
					t.Fatalf("result %d: got item %d %s, want item %d %s\n%s", i, r.Item, r.Status, i, status, b)
				}
				if says == "" {
					if len(r.Errors) != 0 {
						t.Fatalf("result %d: got errors %+v, want none", i, r.Errors)
					}
					continue
				}
				if len(r.Errors) == 0 || r.Errors[0].Item != i || !strings.Contains(r.Errors[0].Error, says) {
					t.Fatalf("result %d: got errors %+v, want item %d saying %q\n%s", i, r.Errors, i, says, b)
				}
			}
			if err := q.Verify(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func toItems(js []string) [][]byte {
	items := make([][]byte, len(js))
	for i, s := range js {
		items[i] = []byte(s)
	}
	return items
}

// TestSubmitEachWithNothingValidWritesNothing keeps the answer to a request
// with no valid movement independent of the queue: nothing is submitted.
func TestSubmitEachWithNothingValidWritesNothing(t *testing.T) {
	q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: store})
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	res, err := submitEach(q, nil, toItems([]string{`{"movement_id":"X"}`}), nil, 4<<10, store, time.Now())
	if err != nil || len(res) != 1 || res[0].Status != StatusRejected {
		t.Fatalf("got %+v %v, want one rejected item and no error", res, err)
	}
}
