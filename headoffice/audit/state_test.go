package audit_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rxedge/agent/headoffice/audit"
)

// editVerifyState rewrites the state file's state through edit, as a hand
// would; with sum, it also sets the checksum the state then has.
func editVerifyState(t *testing.T, path string, sum bool, edit func(st map[string]any)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]any
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	st, ok := env["state"].(map[string]any)
	if !ok {
		t.Fatalf("the state file has no state object")
	}
	edit(st)
	raw, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	env["state"] = json.RawMessage(raw)
	if sum {
		s := sha256.Sum256(raw)
		env["sha256"] = hex.EncodeToString(s[:])
	}
	if b, err = json.Marshal(env); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// A state file that is truncated, damaged, over its bound, of another
// version, edited, or whole but impossible is refused with an error that
// names the file and what to do, never its content; nothing is read and
// the file is left as it was. A state file that does not exist is a
// first pass.
func TestIncrementalRefusesABadState(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	state := filepath.Join(t.TempDir(), "verify.state")
	r.pass(t, state, noRecheck)
	good, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	const marker = "PATIENT-DOE-JOHN"
	stores := func(st map[string]any) map[string]any { return st["stores"].(map[string]any) }
	cases := []struct {
		name  string
		setup func(t *testing.T)
		want  string
	}{
		{"truncated", func(t *testing.T) { os.WriteFile(state, good[:len(good)/2], 0o600) }, "does not read"},
		{"empty", func(t *testing.T) { os.WriteFile(state, nil, 0o600) }, "does not read"},
		{"garbage", func(t *testing.T) {
			b := make([]byte, 4096)
			rand.Read(b)
			os.WriteFile(state, append([]byte(marker), b...), 0o600)
		}, "does not read"},
		{"json of something else", func(t *testing.T) { os.WriteFile(state, []byte(`{"streams":{},"note":"`+marker+`"}`), 0o600) }, "does not read"},
		{"huge", func(t *testing.T) {
			if err := os.Truncate(state, audit.MaxStateBytes+1); err != nil {
				t.Fatal(err)
			}
		}, "over"},
		{"another version", func(t *testing.T) {
			os.WriteFile(state, []byte(strings.Replace(string(good), `"version":1`, `"version":9`, 1)), 0o600)
		}, "version 9"},
		{"edited: the archive read back to its start", func(t *testing.T) {
			os.WriteFile(state, good, 0o600)
			editVerifyState(t, state, false, func(st map[string]any) { st["streams"] = map[string]any{} })
		}, "checksum does not match"},
		{"edited, its checksum made again: a log that cannot be", func(t *testing.T) {
			os.WriteFile(state, good, 0o600)
			editVerifyState(t, state, true, func(st map[string]any) {
				log := stores(st)["S0042"].(map[string]any)["logs"].([]any)[0].(map[string]any)
				log["id"] = marker
			})
		}, "impossible entry"},
		{"edited, its checksum made again: a store id that cannot be", func(t *testing.T) {
			os.WriteFile(state, good, 0o600)
			editVerifyState(t, state, true, func(st map[string]any) { stores(st)["../"+marker] = map[string]any{"keys": []any{}} })
		}, "impossible entry"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup(t)
			before, _ := os.ReadFile(state)
			_, err := audit.Verify(r.ctx, audit.Options{Conn: r.nc, Roster: r.roster, State: audit.FileState(state)})
			if err == nil {
				t.Fatal("the pass ran")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), state) {
				t.Errorf("error %q, want it to name the file and say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), marker) || strings.Contains(err.Error(), r.a.Log) {
				t.Errorf("the error repeats the file's content: %v", err)
			}
			if after, _ := os.ReadFile(state); string(after) != string(before) {
				t.Error("the refused state file was changed")
			}
		})
	}
	os.Remove(state)
	if rep := r.pass(t, state, noRecheck); rep.Incremental || rep.Records != r.records {
		t.Errorf("no state file: incremental %v, %d records read, want a first pass over %d", rep.Incremental, rep.Records, r.records)
	}
}
