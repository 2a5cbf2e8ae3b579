package sync

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/retry"
)

var verdicts = map[string]verdict{
	"stored":    {outcome: retry.Stored, kind: "stored"},
	"already":   {outcome: retry.AlreadyStored, kind: "already_stored"},
	"permanent": {outcome: retry.ItemPermanent, kind: "permanent:too_large", answered: true},
	"timeout":   {outcome: retry.ItemTransient, kind: "transient:timeout"},
	"noresp":    {outcome: retry.ItemTransient, kind: "transient:no_responders"},
	"api":       {outcome: retry.ItemTransient, kind: "transient:api_error", answered: true},
	"inprocess": {outcome: retry.ItemTransient, kind: "transient:in_process", soon: true, answered: true},
	"full":      {outcome: retry.Systemic, kind: "systemic:stream_full", answered: true},
	"offline":   {outcome: retry.Offline, kind: "offline"},
}

// out is an outcome for movement seq: "timeout", or "probe:timeout" for a
// probe's.
func out(seq uint64, what string) outcome {
	probe := strings.HasPrefix(what, "probe:")
	v, ok := verdicts[strings.TrimPrefix(what, "probe:")]
	if !ok {
		panic("no verdict " + what)
	}
	return outcome{rec: &queue.Record{Seq: seq}, v: v, probe: probe}
}

// group is outcomes for movements 1, 2, … in order: "stored timeout" is
// movement 1 stored, movement 2 timed out.
func group(spec string) []outcome {
	var outs []outcome
	for i, w := range strings.Fields(spec) {
		outs = append(outs, out(uint64(i+1), w))
	}
	return outs
}

// summary writes a ruling as "ack=1 charge=2 … pause=systemic:… ask".
func summary(r ruling) string {
	var parts []string
	for _, l := range []struct {
		name string
		outs []outcome
	}{{"ack", r.acks}, {"quarantine", r.quarantine}, {"charge", r.charge}, {"soon", r.soon}, {"release", r.release}} {
		if len(l.outs) == 0 {
			continue
		}
		s := seqs(l.outs)
		slices.Sort(s)
		parts = append(parts, fmt.Sprintf("%s=%s", l.name, strings.ReplaceAll(strings.Trim(fmt.Sprint(s), "[]"), " ", ",")))
	}
	if r.pause != "" {
		parts = append(parts, "pause="+strings.SplitN(r.pause, ":", 3)[0]+":"+strings.SplitN(r.pause, ":", 3)[1])
	}
	if r.ask {
		parts = append(parts, "ask")
	}
	if r.probe {
		parts = append(parts, fmt.Sprintf("probeOK=%v", r.probeOK))
	}
	return strings.Join(parts, " ")
}

// TestBlame pins the P2/P4 rules: which failures are charged, which go
// back uncharged, and when the sender pauses. Each case settles groups in
// turn (online unless the group starts with "paused:"), then optionally
// goes quiet or hears the liveness probe's answer ("alive" / "dead").
func TestBlame(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []string // groups, "quiet", "alive" or "dead"
		want  []string // the ruling of each step
	}{
		{"stored is synced", []string{"stored already"}, []string{"ack=1,2"}},
		{"permanent is quarantined at once", []string{"permanent stored"}, []string{"ack=2 quarantine=1"}},
		{"offline charges nothing", []string{"offline offline"}, []string{"release=1,2"}},
		{"a later success charges what failed before it",
			[]string{"timeout stored api stored"}, []string{"ack=2,4 charge=1,3"}},
		{"a failure central answered waits for evidence, then is charged when all is quiet",
			[]string{"api", "quiet"}, []string{"", "charge=1"}},
		{"an unanswered failure asks central; central answers: charged",
			[]string{"timeout", "alive"}, []string{"ask", "charge=1"}},
		{"an unanswered failure asks central; no answer: pause, nothing charged",
			[]string{"timeout noresp", "dead"}, []string{"ask", "release=1,2 pause=systemic:unresponsive"}},
		{"quiet with an unanswered failure asks",
			[]string{"timeout api", "quiet"}, []string{"ask", "ask"}},
		{"systemic pauses and gives back what was held",
			[]string{"api", "full"}, []string{"", "release=1,1 pause=systemic:stream_full"}},
		{"K failures in a row pause and charge nothing",
			[]string{"api api", "timeout"}, []string{"", "release=1,1,2 pause=systemic:consecutive_failures"}},
		{"a success resets the count",
			[]string{"api stored api", "api"}, []string{"ack=2 charge=1", ""}},
		{"not online, failures go back",
			[]string{"paused: api timeout"}, []string{"release=1,2"}},
		{"a probe central does not answer is held and asks",
			[]string{"paused: probe:timeout", "alive"}, []string{"ask probeOK=false", "charge=1 probeOK=true"}},
		{"a probe nobody answers charges nothing",
			[]string{"paused: probe:noresp", "dead"}, []string{"ask probeOK=false", "release=1 pause=systemic:unresponsive probeOK=false"}},
		{"a probe central answered about resumes, uncharged",
			[]string{"paused: probe:api"}, []string{"release=1 probeOK=true"}},
		{"a probe into a full stream does not resume",
			[]string{"paused: probe:full"}, []string{"release=1 pause=systemic:stream_full probeOK=false"}},
		{"a stored probe resumes",
			[]string{"paused: probe:stored"}, []string{"ack=1 probeOK=true"}},
		{"in process is retried soon and uncharged, at most twice in a row, then held",
			[]string{"inprocess", "inprocess", "inprocess", "quiet"}, []string{"soon=1", "soon=1", "", "charge=1"}},
		{"another outcome ends the in-process run",
			[]string{"inprocess", "inprocess", "api", "quiet", "inprocess"}, []string{"soon=1", "soon=1", "", "charge=1", "soon=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBlame(3, 2)
			for i, st := range tc.steps {
				var r ruling
				switch st {
				case "quiet":
					r = b.quiet()
				case "alive":
					r = b.alive(nil)
				case "dead":
					r = b.alive(errors.New("timeout"))
				default:
					online := !strings.HasPrefix(st, "paused:")
					r = b.settle(group(strings.TrimPrefix(st, "paused:")), online)
				}
				if got := summary(r); got != tc.want[i] {
					t.Fatalf("step %d (%s): got %q, want %q", i, st, got, tc.want[i])
				}
			}
		})
	}
}

// TestSplitBatch: a failed batch is one failure, never a charge per
// member; members are resent alone unless the failure is central's.
func TestSplitBatch(t *testing.T) {
	for _, tc := range []struct {
		v    verdict
		want batchStep
	}{
		{verdicts["offline"], batchRelease},
		{verdict{outcome: retry.ItemTransient, kind: "transient:batch_not_enabled", noBatch: true, answered: true}, batchRelease},
		{verdicts["full"], batchPause},
		{verdicts["timeout"], batchAsk},
		{verdicts["noresp"], batchAsk},
		{verdict{outcome: retry.ItemTransient, kind: "transient:batch_incomplete", answered: true}, batchSingly},
		{verdict{outcome: retry.AlreadyStored, kind: "already_stored", singly: true, answered: true}, batchSingly},
		{verdicts["permanent"], batchSingly},
		{verdicts["inprocess"], batchSingly},
		{verdicts["api"], batchSingly},
	} {
		if got := splitBatch(tc.v); got != tc.want {
			t.Errorf("splitBatch(%s): got %d, want %d", tc.v.kind, got, tc.want)
		}
	}
}

// TestPacing pins the loop's states: resume after the jitter, pause on a
// systemic failure only when online, probe with backoff, resume on the
// first probe that reaches central.
func TestPacing(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	probe := retry.Policy{BaseDelay: time.Second, MaxDelay: time.Minute}
	for _, tc := range []struct {
		name   string
		events []string // "connect", "disconnect", "systemic", "pause", "probe-ok", "probe-fail", "+<duration>"
		state  int32
		next   step
	}{
		{"starts offline", nil, stOffline, stepWait},
		{"connected waits the jitter", []string{"connect"}, stResuming, stepWait},
		{"then resumes", []string{"connect", "+10s"}, stResuming, stepResume},
		{"online fills", []string{"connect", "resume"}, stOnline, stepFill},
		{"systemic pauses an online loop", []string{"connect", "resume", "systemic"}, stPaused, stepWait},
		{"systemic leaves a resuming loop alone", []string{"connect", "systemic"}, stResuming, stepWait},
		{"paused probes after its delay", []string{"connect", "resume", "systemic", "+1s"}, stPaused, stepProbe},
		{"one probe at a time", []string{"connect", "resume", "systemic", "+1s", "probing"}, stPaused, stepWait},
		{"a failed probe backs off", []string{"connect", "resume", "systemic", "+1s", "probing", "probe-fail", "+500ms"}, stPaused, stepWait},
		{"and probes again", []string{"connect", "resume", "systemic", "+1s", "probing", "probe-fail", "+1s"}, stPaused, stepProbe},
		{"a probe that reached central resumes", []string{"connect", "resume", "systemic", "+1s", "probing", "probe-ok"}, stOnline, stepFill},
		{"a disconnect ends a pause", []string{"connect", "resume", "systemic", "disconnect"}, stOffline, stepWait},
		{"a queue error pauses a resuming loop too", []string{"connect", "pause"}, stPaused, stepWait},
		{"a pause soon after a probe resumed backs off further", // attempt 1: 1s
			[]string{"connect", "resume", "systemic", "+1s", "probing", "probe-ok", "+10s", "systemic", "+700ms"}, stPaused, stepWait},
		{"and probes after the longer delay",
			[]string{"connect", "resume", "systemic", "+1s", "probing", "probe-ok", "+10s", "systemic", "+1s"}, stPaused, stepProbe},
		{"a pause long after starts over", // attempt 0: 500ms
			[]string{"connect", "resume", "systemic", "+1s", "probing", "probe-ok", "+2m", "systemic", "+500ms"}, stPaused, stepProbe},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pacing{probe: probe, resumeJitter: 20 * time.Second}
			now := t0
			const rnd = 0.5 // delays are half their ceiling
			for _, ev := range tc.events {
				switch {
				case ev == "connect":
					p.connected(now, rnd)
				case ev == "disconnect":
					p.disconnected("disconnected")
				case ev == "resume":
					p.resume()
				case ev == "systemic":
					p.systemic(now, rnd, "systemic:stream_full")
				case ev == "pause":
					p.pause(now, rnd, "local:queue_error")
				case ev == "probing":
					p.probing()
				case ev == "probe-ok":
					p.probed(now, rnd, true)
				case ev == "probe-fail":
					p.probed(now, rnd, false)
				case strings.HasPrefix(ev, "+"):
					d, err := time.ParseDuration(ev[1:])
					if err != nil {
						t.Fatal(err)
					}
					now = now.Add(d)
				}
			}
			if p.state != tc.state || p.next(now) != tc.next {
				t.Fatalf("after %v: got state %s (%d) next %d, want %s (%d) next %d",
					tc.events, stateName(p.state), p.state, p.next(now), stateName(tc.state), tc.state, tc.next)
			}
		})
	}
}
