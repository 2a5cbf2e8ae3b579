package provision_test

import (
	"crypto/rand"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/rxedge/agent/central/ledger"
	"github.com/rxedge/agent/headoffice/provision"
)

func vkey(t *testing.T, store string) (string, note.Signer) {
	t.Helper()
	skey, vk, err := ledger.GenerateKey(rand.Reader, store)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := note.NewSigner(skey)
	return vk, s
}

// TestRosterKeys reads a roster with a store with no key, one with one
// and one with two (a rotation), and opens checkpoints with its
// verifiers: each store's own key only.
func TestRosterKeys(t *testing.T) {
	k1, s1 := vkey(t, "S0001")
	k2a, _ := vkey(t, "S0002")
	k2b, s2b := vkey(t, "S0002")
	in := fmt.Sprintf("# stores\nS0003\nS0001 %s\nS0002 %s # old\nS0002\t%s\n", k1, k2a, k2b)
	r, err := provision.ParseRoster(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"S0003", "S0001", "S0002"}; !reflect.DeepEqual(r.Stores, want) {
		t.Fatalf("stores %v, want %v", r.Stores, want)
	}
	if got := r.Keys("S0002"); !reflect.DeepEqual(got, []string{k2a, k2b}) {
		t.Fatalf("keys of S0002 %v", got)
	}
	if len(r.Keys("S0003")) != 0 || len(r.Keys("S9999")) != 0 {
		t.Fatal("keys for a store listed without any")
	}
	stores, err := provision.ReadRoster(strings.NewReader(in))
	if err != nil || !reflect.DeepEqual(stores, r.Stores) {
		t.Fatalf("ReadRoster of a roster with keys: %v, %v", stores, err)
	}
	sign := func(store string, s note.Signer) []byte {
		b, err := ledger.Sign(ledger.Checkpoint{Store: store, Log: "0123456789abcdef", Size: 1, First: 1}, s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if _, _, err := ledger.Open(sign("S0001", s1), r.Verifiers()); err != nil {
		t.Errorf("S0001's checkpoint: %v", err)
	}
	if _, _, err := ledger.Open(sign("S0002", s2b), r.Verifiers()); err != nil {
		t.Errorf("S0002's checkpoint with its new key: %v", err)
	}
	// S0001's key signing a checkpoint named for S0002 is refused by
	// Sign; a note forged with S0001's key over S0002's text is refused by
	// Open (the key is not named for S0002).
	forged, err := note.Sign(&note.Note{Text: ledger.Checkpoint{Store: "S0002", Log: "0123456789abcdef", Size: 1, First: 1}.Text()}, s1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ledger.Open(forged, r.Verifiers()); err == nil {
		t.Error("a checkpoint of S0002 signed with S0001's key was accepted")
	}
}

func TestParseRosterRefuses(t *testing.T) {
	k1, _ := vkey(t, "S0001")
	k2, _ := vkey(t, "S0002")
	for name, in := range map[string]string{
		"another store's key": "S0001 " + k2 + "\n",
		"not a key":           "S0001 PRIVATE+KEY+x\n",
		"key twice":           "S0001 " + k1 + "\nS0001 " + k1 + "\n",
		"id, then id and key": "S0001\nS0001 " + k1 + "\n",
		"key, then id":        "S0001 " + k1 + "\nS0001\n",
		"three fields":        "S0001 " + k1 + " extra\n",
		"bad id with key":     "S0.01 " + k1 + "\n",
	} {
		_, err := provision.ParseRoster(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), "line ") {
			t.Errorf("%s: %v, want a refusal naming the line", name, err)
		}
	}
}

// TestParseRosterNamesLinesNotContent: every refusal names its line and
// repeats nothing of it, and a line over MaxRosterLine is refused without
// reading on.
func TestParseRosterNamesLinesNotContent(t *testing.T) {
	k1, _ := vkey(t, "S0001")
	_, other, err := note.GenerateKey(rand.Reader, "someone")
	if err != nil {
		t.Fatal(err)
	}
	const secret = "Q7Z9SECRET"
	for name, in := range map[string]string{
		"another store's key": "S0001\n" + secret + " " + k1 + "\n",
		"not a key":           "S0001 rxedge-store-" + secret + "+00000000+AAAA\n",
		"bad store id":        "S0001\n" + secret + ".x\n",
		"reserved id":         "S0001\nAUDIT # " + secret + "\n",
		"a key of no store":   "S0001 " + other + "\n",
		"a line too long":     "S0001\nS0002 " + secret + strings.Repeat("x", provision.MaxRosterLine) + "\n",
		"listed twice":        "S0001\nS0001\n",
	} {
		_, err := provision.ParseRoster(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), "line 2") && !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%s: %v, want a refusal naming the line", name, err)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "AAAA") || strings.Contains(err.Error(), "someone") {
			t.Errorf("%s: the error repeats the line: %v", name, err)
		}
	}
	_, err = provision.ParseRoster(strings.NewReader("S0001\nS0002 " + strings.Repeat("x", provision.MaxRosterLine) + "\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2: over") {
		t.Errorf("a long second line: %v, want it named", err)
	}
}

// TestRosterPlaces reads regions and tags beside ids and keys, on any of
// a store's lines, and refuses two regions, an unknown attribute and a
// value outside the alphabet, naming the line only. A roster without
// attributes reads as before.
func TestRosterPlaces(t *testing.T) {
	k1, _ := vkey(t, "S0001")
	k2a, _ := vkey(t, "S0002")
	k2b, _ := vkey(t, "S0002")
	in := fmt.Sprintf("S0001 %s region=north tag=24h\nS0002 region=south %s\nS0002 %s tag=drive-thru tag=24h\nS0003\n", k1, k2a, k2b)
	r, err := provision.ParseRoster(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	for store, want := range map[string]provision.Place{
		"S0001": {Region: "north", Tags: []string{"24h"}},
		"S0002": {Region: "south", Tags: []string{"drive-thru", "24h"}},
		"S0003": {},
	} {
		if got := r.Place(store); !reflect.DeepEqual(got, want) {
			t.Errorf("Place(%s) = %+v, want %+v", store, got, want)
		}
	}
	if len(r.Keys("S0002")) != 2 || !reflect.DeepEqual(r.Stores, []string{"S0001", "S0002", "S0003"}) {
		t.Errorf("keys %v, stores %v: the attributes changed what the roster says of keys", r.Keys("S0002"), r.Stores)
	}
	for name, in := range map[string]string{
		"two regions":       "S0001 region=a\nS0002 region=b region=c\n",
		"unknown attribute": "S0001 owner=x\n",
		"markup in a value": "S0001 tag=<b>\n",
		"empty value":       "S0001 region=\n",
		"too many tags":     "S0001" + manyTags(provision.MaxTags+1) + "\n",
	} {
		_, err := provision.ParseRoster(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), "line ") || strings.Contains(err.Error(), "<b>") {
			t.Errorf("%s: error %v, want a refusal naming the line and not the value", name, err)
		}
	}
}

// manyTags is n distinct tag attributes.
func manyTags(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, " tag=t%d", i)
	}
	return b.String()
}
