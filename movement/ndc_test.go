package movement

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestCanonicalNDC(t *testing.T) {
	for _, c := range []struct {
		in, want string
		err      error
	}{
		{"00591-0540-01", "00591-0540-01", nil},
		{"00591054001", "00591-0540-01", nil},
		{"0591-0540-01", "00591-0540-01", nil},
		{"12345-678-90", "12345-0678-90", nil},
		{"12345-6789-0", "12345-6789-00", nil},
		{"1234-5678-90", "01234-5678-90", nil},
		{"12345678901", "12345-6789-01", nil},
		{"0591054001", "", ErrNDCAmbiguous},
		{"", "", ErrNDCForm},
		{"123456789012", "", ErrNDCForm},
		{"1-2-3-4", "", ErrNDCForm},
		{"12345--6789", "", ErrNDCForm},
		{"12345-6789-01-", "", ErrNDCForm},
		{"-12345-6789-0", "", ErrNDCForm},
		{"12345-6789", "", ErrNDCForm},
		{"1234-5678-9O", "", ErrNDCForm},
		{"1234-567-89", "", ErrNDCForm},
		{"12345-6789-01-1", "", ErrNDCForm},
		{" 12345-6789-01", "", ErrNDCForm},
		{"1234-56789-01", "", ErrNDCForm},
	} {
		got, err := CanonicalNDC(c.in)
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("CanonicalNDC(%q) = %q, %v; want %q, %v", c.in, got, err, c.want, c.err)
		}
	}
	cs, ok := NDCCandidates("0591054001")
	if want := [3]string{"00591-0540-01", "05910-0540-01", "05910-5400-01"}; !ok || cs != want {
		t.Errorf("NDCCandidates = %v, %v; want %v", cs, ok, want)
	}
	if got := NDCSpellings("00591-0540-01"); !slices.Equal(got, []string{
		"00591-0540-01", "00591054001", "0591-0540-01", "0591054001",
		"00591-540-01", "0059154001", "00591-0540-1", "0059105401"}) {
		t.Errorf("NDCSpellings = %q", got)
	}
	if NDCSpellings("0591-0540-01") != nil {
		t.Error("NDCSpellings of a spelling that is not canonical")
	}
}

// referenceNDC is the canonical NDC as the issue words it, written apart
// from CanonicalNDC with regular expressions: the fuzz test holds the two
// to the same answers.
func referenceNDC(s string) (string, error) {
	if regexp.MustCompile(`^[0-9]{10}$`).MatchString(s) {
		return "", ErrNDCAmbiguous
	}
	if m := regexp.MustCompile(`^([0-9]{5})([0-9]{4})([0-9]{2})$`).FindStringSubmatch(s); m != nil {
		return m[1] + "-" + m[2] + "-" + m[3], nil
	}
	m := regexp.MustCompile(`^([0-9]{4,5})-([0-9]{3,4})-([0-9]{1,2})$`).FindStringSubmatch(s)
	if m == nil || len(m[1])+len(m[2])+len(m[3]) < 10 || len(m[1])+len(m[2])+len(m[3]) > 11 {
		return "", ErrNDCForm
	}
	if len(m[1])+len(m[2])+len(m[3]) == 10 {
		for i := 1; i <= 3; i++ {
			if want := []int{0, 5, 4, 2}[i]; len(m[i]) < want {
				m[i] = strings.Repeat("0", want-len(m[i])) + m[i]
			}
		}
	}
	if len(m[1]) != 5 || len(m[2]) != 4 || len(m[3]) != 2 {
		return "", ErrNDCForm
	}
	return m[1] + "-" + m[2] + "-" + m[3], nil
}

// FuzzCanonicalNDC holds CanonicalNDC to the reference, and checks its
// invariants: a canonical form is its own canonical form and 13 bytes of
// 5-4-2; every spelling NDCSpellings lists canonicalises to it (or, bare
// 10-digit, has it among its candidates), and includes the input; and a
// bare 10-digit NDC's three candidates are canonical (two may be one, as
// for 0000000000) and list it among their spellings.
func FuzzCanonicalNDC(f *testing.F) {
	for _, s := range []string{"00591-0540-01", "00591054001", "0591-0540-01", "0591054001", "12345-678-90",
		"12345-6789-0", "1-2-3", "", "--", "99999-9999-99", "0000-0000-00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := CanonicalNDC(s)
		want, werr := referenceNDC(s)
		if got != want || !errors.Is(err, werr) || (err == nil) != (werr == nil) {
			t.Fatalf("CanonicalNDC(%q) = %q, %v; the reference says %q, %v", s, got, err, want, werr)
		}
		if cs, ok := NDCCandidates(s); ok {
			if !errors.Is(err, ErrNDCAmbiguous) {
				t.Fatalf("NDCCandidates(%q) = %v with %v", s, cs, err)
			}
			for _, c := range cs {
				if k, err := CanonicalNDC(c); err != nil || k != c || !slices.Contains(NDCSpellings(c), s) {
					t.Fatalf("candidate %q of %q is not canonical, or does not list it as a spelling", c, s)
				}
			}
		}
		if err != nil {
			return
		}
		if k, err := CanonicalNDC(got); err != nil || k != got || len(got) != ndcLen {
			t.Fatalf("canonical %q of %q is not a fixed point: %q, %v", got, s, k, err)
		}
		sp := NDCSpellings(got)
		if !slices.Contains(sp, s) {
			t.Fatalf("spellings of %q do not include %q: %q", got, s, sp)
		}
		for _, x := range sp {
			if !spells(x, got) {
				t.Fatalf("spelling %q does not spell %q", x, got)
			}
		}
	})
}

// TestSpellingsAreOneMovement is the digest rule: the three spellings of
// one NDC prepare to one canonical ndc, each keeping its spelling in
// ndc_as_sent (so each digest covers what was sent), and each is
// Equivalent to the others, and to the form an earlier agent stored
// (ndc as sent); a movement that differs in anything else is not.
func TestSpellingsAreOneMovement(t *testing.T) {
	const tmpl = `{"movement_id":"RX-1","type":"dispense","ndc":"%s","quantity":60,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z","schedule":"CII"}`
	var ps []Prepared
	for _, s := range []string{"00591-0540-01", "00591054001", "0591-0540-01"} {
		p, es := Prepare([]byte(strings.Replace(tmpl, "%s", s, 1)), store, now)
		if es != nil {
			t.Fatalf("%s: %v", s, es)
		}
		m, _ := Decode(p.Payload)
		if m.NDC != "00591-0540-01" || (s == m.NDC) != (m.NDCAsSent == "") || m.NDCAsSent != "" && m.NDCAsSent != s {
			t.Fatalf("%s: stored as ndc %q, ndc_as_sent %q", s, m.NDC, m.NDCAsSent)
		}
		ps = append(ps, p)
	}
	for i := range ps {
		for j := range ps {
			if !ps[i].Equivalent(ps[j].Digest) {
				t.Errorf("spelling %d is not equivalent to spelling %d", i, j)
			}
		}
	}
	// What an agent before canonical NDCs stored: ndc as sent.
	old := Digest([]byte(`{"movement_id":"RX-1","store_id":"S0042","type":"dispense","ndc":"0591-0540-01","quantity":"60","unit":"EA","occurred_at":"2026-03-01T09:30:00Z","schedule":"CII"}`))
	for i, p := range ps {
		if !p.Equivalent(old) {
			t.Errorf("spelling %d is not equivalent to the earlier agent's record", i)
		}
	}
	other, _ := Prepare([]byte(strings.Replace(strings.Replace(tmpl, "%s", "0591-0540-01", 1), "60", "61", 1)), store, now)
	otherNDC, _ := Prepare([]byte(strings.Replace(tmpl, "%s", "00591-0540-02", 1)), store, now)
	for i, p := range ps {
		if p.Equivalent(other.Digest) || p.Equivalent(otherNDC.Digest) {
			t.Errorf("spelling %d is equivalent to another movement", i)
		}
	}
	// The canonical form prepares to itself, ndc_as_sent and all.
	q, es := Prepare(ps[2].Payload, store, now)
	if es != nil || q.Digest != ps[2].Digest {
		t.Fatalf("the canonical form does not prepare to itself: %v", es)
	}
}

// TestCountAndAdjustments checks what the new types store: a count of
// zero, a count's method defaulting to exact, reasons on adjustments.
func TestCountAndAdjustments(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"movement_id":"C1","type":"count","count_kind":"quarterly","ndc":"0591-0540-01","quantity":"0.0","unit":"EA","occurred_at":"2026-03-01T09:30:00Z","schedule":"CII"}`,
			`{"movement_id":"C1","store_id":"S0042","type":"count","ndc":"00591-0540-01","ndc_as_sent":"0591-0540-01","quantity":"0","unit":"EA","occurred_at":"2026-03-01T09:30:00Z","schedule":"CII","count_kind":"quarterly","count_method":"exact"}`},
		{`{"movement_id":"C2","type":"count","count_kind":"biennial","count_method":"estimated","ndc":"00591-0540-01","quantity":12.5,"unit":"ML","occurred_at":"2026-03-01T09:30:00Z","schedule":"CIV"}`,
			`{"movement_id":"C2","store_id":"S0042","type":"count","ndc":"00591-0540-01","quantity":"12.5","unit":"ML","occurred_at":"2026-03-01T09:30:00Z","schedule":"CIV","count_kind":"biennial","count_method":"estimated"}`},
		{`{"movement_id":"A1","type":"adjust_out","reason":"theft","ndc":"00591-0540-01","quantity":3,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z","schedule":"CII"}`,
			`{"movement_id":"A1","store_id":"S0042","type":"adjust_out","ndc":"00591-0540-01","quantity":"3","unit":"EA","occurred_at":"2026-03-01T09:30:00Z","schedule":"CII","reason":"theft"}`},
		{`{"movement_id":"A2","type":"adjust","ndc":"00591-0540-01","quantity":3,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`,
			`{"movement_id":"A2","store_id":"S0042","type":"adjust","ndc":"00591-0540-01","quantity":"3","unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`},
	} {
		p, es := Prepare([]byte(c.in), store, now)
		if es != nil {
			t.Fatalf("%s: %v", c.in, es)
		}
		if string(p.Payload) != c.want {
			t.Errorf("stored\n got %s\nwant %s", p.Payload, c.want)
		}
	}
}

// TestEquivalentFromAnEarlierPayload asks from a payload an earlier agent
// stored (ndc as sent): a new spelling of it is equivalent.
func TestEquivalentFromAnEarlierPayload(t *testing.T) {
	old := []byte(`{"movement_id":"RX-1","store_id":"S0042","type":"dispense","ndc":"0591-0540-01","quantity":"60","unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`)
	p := Prepared{Digest: Digest(old), Payload: old}
	n, es := Prepare([]byte(`{"movement_id":"RX-1","type":"dispense","ndc":"00591054001","quantity":60,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`), store, now)
	if es != nil || !p.Equivalent(n.Digest) || !n.Equivalent(p.Digest) {
		t.Fatalf("an earlier payload and a new spelling are not equivalent: %v", es)
	}
}
