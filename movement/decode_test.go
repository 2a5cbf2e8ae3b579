package movement

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// typical is a movement as the store's software sends it: every field
// that a controlled dispense carries, padded with a note to 256 bytes.
var typical = func() []byte {
	m := Movement{
		MovementID: "POS-S0042-000000017",
		StoreID:    "S0042",
		Type:       TypeDispense,
		NDC:        "12345-6789-01",
		Quantity:   "30",
		Unit:       "EA",
		OccurredAt: "2026-03-01T09:30:00-05:00",
		Schedule:   "CII",
		Lot:        "L0000017",
		Expires:    "2028-06",
		RxRef:      "RX0000000017",
	}
	m.Note = strings.Repeat("n", 256-len(m.Canonical())-len(`,"note":""`))
	return m.Canonical()
}()

// decodeCases are inputs on the edge of what the fast reader takes: each
// must decode exactly as the token-by-token decoder does.
var decodeCases = []string{
	valid,
	string(typical),
	`{}`,
	` {} `,
	"\t\r\n{\"ndc\" : \"1\" ,\n\"unit\":\"EA\"}\n\r\t ",
	`{"quantity":2}`,
	`{"quantity":-0.5e+10}`,
	`{"quantity":0}`,
	`{"quantity":01}`,
	`{"quantity":1.}`,
	`{"quantity":1e}`,
	`{"quantity":-}`,
	`{"quantity":2x}`,
	`{"quantity":"2"}`,
	`{"quantity":true}`,
	`{"quantity":null}`,
	`{"ndc":2}`,
	`{"ndc":null}`,
	`{"ndc":{"a":"b"}}`,
	`{"ndc":["x"]}`,
	`{"note":"a\"b\\c\/d\b\f\n\r\t"}`,
	`{"note":"\u00e9\u20AC\ud83d\ude00"}`,
	`{"note":"\ud83d"}`,
	`{"note":"\ud83dx"}`,
	`{"note":"\ude00\ud83d"}`,
	`{"note":"\ud83d\u0041"}`,
	`{"note":"\ud83d\u00"}`,
	`{"note":"\u00g0"}`,
	`{"note":"\'"}`,
	`{"note":"\x"}`,
	`{"note":"caf` + "\xe9" + `"}`,
	`{"note":"\u00e9` + "\xff" + `"}`,
	`{"note":"` + "\xed\xa0\x80" + `"}`,
	`{"note":"é€😀"}`,
	`{"note":"a` + "\x01" + `b"}`,
	`{"note":"a` + "\x7f" + `b"}`,
	`{"note":"unterminated}`,
	`{"note":"x\`,
	`{"movement\u005fid":"x"}`,
	`{"Movement_ID":"x"}`,
	`{"unit":"EA","unit":"ML"}`,
	`{"unit":1,"unit":"ML"}`,
	`{"color":"red","color":"blue"}`,
	`{"unit":"EA",}`,
	`{,"unit":"EA"}`,
	`{"unit" "EA"}`,
	`{"unit":"EA"]`,
	`{"unit":"EA"`,
	`{"unit":`,
	`{"unit"`,
	`{`,
	``,
	`   `,
	`[]`,
	`"x"`,
	`null`,
	`{}{}`,
	`{} x`,
	`{}]`,
	"\ufeff{}",
	"{}\x00",
	"\v{}",
}

// TestDecodeMatchesTheTokenDecoder holds Decode, and its one-pass reader
// alone, to the decoder it replaced: on every case the same movement or
// the same errors.
func TestDecodeMatchesTheTokenDecoder(t *testing.T) {
	for _, in := range decodeCases {
		checkAgainstOld(t, []byte(in))
	}
	for _, in := range decodeCases[:2] {
		// The movements the store's software sends take the fast path.
		if decodeFast([]byte(in)) == nil {
			t.Errorf("the one-pass reader hands over %s", in)
		}
	}
}

// FuzzDecode is the differential test: whatever the input, Decode answers
// as the token-by-token decoder does, and the one-pass reader accepts
// only what that decoder accepts, with the same value.
func FuzzDecode(f *testing.F) {
	for _, in := range decodeCases {
		f.Add([]byte(in))
	}
	f.Add([]byte("{" + strings.Repeat(`"a":1,`, MaxMembers) + `"a":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAgainstOld(t, data)
		checkBound(t, data, func() { Decode(data) })
	})
}

func checkAgainstOld(t *testing.T, data []byte) {
	t.Helper()
	want, wantErrs := decodeOld(data)
	got, gotErrs := Decode(data)
	if slices.Contains(gotErrs, tooManyMembers) {
		// Past MaxMembers Decode refuses the object, where the old
		// decoder went on to list an error for every member: both refuse.
		if wantErrs == nil || got != nil {
			t.Fatalf("%q: refused for its members, which the token decoder accepts", data)
		}
		return
	}
	if !reflect.DeepEqual(gotErrs, wantErrs) {
		t.Fatalf("%q: errors\n got %v\nwant %v", data, gotErrs, wantErrs)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: movement\n got %+v\nwant %+v", data, got, want)
	}
	if fast := decodeFast(data); fast != nil {
		if wantErrs != nil {
			t.Fatalf("%q: the one-pass reader accepts what the token decoder refuses: %v", data, wantErrs)
		}
		if *fast != *want {
			t.Fatalf("%q: the one-pass reader reads\n%+v\nwhere the token decoder reads\n%+v", data, *fast, *want)
		}
	}
}

// BenchmarkDecode decodes the typical movement; BenchmarkDecodeTokens and
// BenchmarkDecodeUnmarshal are its baselines on the same input: the token
// decoder Decode replaced, and one json.Unmarshal into the struct (which
// checks nothing Decode checks).
func BenchmarkDecode(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(typical)))
	for b.Loop() {
		if _, es := Decode(typical); es != nil {
			b.Fatal(es)
		}
	}
}

func BenchmarkDecodeTokens(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(typical)))
	for b.Loop() {
		if _, es := decodeOld(typical); es != nil {
			b.Fatal(es)
		}
	}
}

func BenchmarkDecodeUnmarshal(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(typical)))
	for b.Loop() {
		var m Movement
		if err := json.Unmarshal(typical, &m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPrepare is the whole of the intake's work on one movement:
// decode, validate, canonical encoding, key and digest.
func BenchmarkPrepare(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, es := Prepare(typical, store, now); es != nil {
			b.Fatal(es)
		}
	}
}
