package movement

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

const store = "S0042"

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const valid = `{"movement_id":"POS-17","type":"dispense","ndc":"12345-6789-01","quantity":2,"unit":"EA","occurred_at":"2026-03-01T09:30:00-05:00"}`

func TestKeyIsFirst128BitsOfSHA256(t *testing.T) {
	sum := sha256.Sum256([]byte("S0042\x00POS-17"))
	want := hex.EncodeToString(sum[:16])
	if got := KeyString("S0042", "POS-17"); got != want {
		t.Fatalf("KeyString = %s, want %s", got, want)
	}
	if len(want) != 32 {
		t.Fatalf("key length %d, want 32", len(want))
	}
	// The separator matters: ("S0", "042POS") must not collide with ("S0042", "POS").
	if KeyString("S0", "042POS-17") == KeyString("S004", "2POS-17") {
		t.Fatal("keys of different (store, id) pairs collide")
	}
	k, ok := ParseKey(want)
	if !ok || hex.EncodeToString(k[:]) != want {
		t.Fatalf("ParseKey(%s) = %x, %v", want, k, ok)
	}
	for _, bad := range []string{"", "xyz", strings.ToUpper(want), want + "00", want[:31] + "g"} {
		if _, ok := ParseKey(bad); ok {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
}

func TestPrepareCanonical(t *testing.T) {
	p, es := Prepare([]byte(valid), store, now)
	if es != nil {
		t.Fatalf("Prepare: %v", es)
	}
	want := `{"movement_id":"POS-17","store_id":"S0042","type":"dispense","ndc":"12345-6789-01","quantity":"2","unit":"EA","occurred_at":"2026-03-01T09:30:00-05:00"}`
	if string(p.Payload) != want {
		t.Fatalf("canonical\n got %s\nwant %s", p.Payload, want)
	}
	if p.Class != Ordinary || p.KeyString() != KeyString(store, "POS-17") || p.Digest != sha256.Sum256(p.Payload) {
		t.Fatalf("prepared = %+v", p)
	}

	// The same movement with other field order, spacing, an explicit store
	// and an equivalent quantity is the same movement.
	same := `{ "unit":"EA", "quantity":"002.000", "store_id":"S0042", "occurred_at":"2026-03-01T09:30:00-05:00",
	  "ndc":"12345-6789-01","type":"dispense","movement_id":"POS-17" }`
	q, es := Prepare([]byte(same), store, now)
	if es != nil {
		t.Fatalf("Prepare(same): %v", es)
	}
	if q.Digest != p.Digest || !bytes.Equal(q.Payload, p.Payload) {
		t.Fatalf("equivalent submissions differ:\n%s\n%s", p.Payload, q.Payload)
	}

	// Different content, same id: same key, different digest.
	other := strings.Replace(valid, `"quantity":2`, `"quantity":3`, 1)
	r, es := Prepare([]byte(other), store, now)
	if es != nil {
		t.Fatalf("Prepare(other): %v", es)
	}
	if r.Key != p.Key || r.Digest == p.Digest {
		t.Fatal("changed content must keep the key and change the digest")
	}

	ctl := strings.Replace(valid, `"unit":"EA"`, `"unit":"EA","schedule":"CII","dea_form_222":"123456789"`, 1)
	c, es := Prepare([]byte(ctl), store, now)
	if es != nil {
		t.Fatalf("Prepare(controlled): %v", es)
	}
	if c.Class != Controlled || c.Schedule != "CII" {
		t.Fatalf("class %v schedule %q, want controlled CII", c.Class, c.Schedule)
	}
}

func TestPrepareRejects(t *testing.T) {
	long := strings.Repeat("x", 200)
	tests := []struct {
		name  string
		input string
		field string // the field the error must name ("" = the whole object)
	}{
		{"not json", `{"movement_id":`, ""},
		{"array not object", `[1,2]`, ""},
		{"trailing data", valid + `{}`, ""},
		{"unknown field", strings.Replace(valid, `"unit"`, `"patient":"x","unit"`, 1), "patient"},
		{"repeated field", strings.Replace(valid, `"unit":"EA"`, `"unit":"EA","unit":"ML"`, 1), "unit"},
		{"missing movement_id", strings.Replace(valid, `"movement_id":"POS-17",`, ``, 1), "movement_id"},
		{"movement_id too long", strings.Replace(valid, `POS-17`, long, 1), "movement_id"},
		{"movement_id control char", strings.Replace(valid, `POS-17`, `POS\u000017`, 1), "movement_id"},
		{"movement_id not a string", strings.Replace(valid, `"POS-17"`, `17`, 1), "movement_id"},
		{"other store", strings.Replace(valid, `{`, `{"store_id":"S9999",`, 1), "store_id"},
		{"bad type", strings.Replace(valid, `dispense`, `sell`, 1), "type"},
		{"missing ndc", strings.Replace(valid, `"ndc":"12345-6789-01",`, ``, 1), "ndc"},
		{"ndc ambiguous 10 digits", strings.Replace(valid, `12345-6789-01`, `1234567890`, 1), "ndc"},
		{"ndc_as_sent of another NDC", strings.Replace(valid, `"unit":"EA"`, `"unit":"EA","ndc_as_sent":"12345-6789-02"`, 1), "ndc_as_sent"},
		{"ndc_as_sent not an NDC", strings.Replace(valid, `"unit":"EA"`, `"unit":"EA","ndc_as_sent":"x"`, 1), "ndc_as_sent"},
		{"adjust_in without reason", strings.Replace(valid, `dispense`, `adjust_in`, 1), "reason"},
		{"adjust_out without reason", strings.Replace(valid, `dispense`, `adjust_out`, 1), "reason"},
		{"adjust_in theft", strings.Replace(valid, `"dispense"`, `"adjust_in","reason":"theft"`, 1), "reason"},
		{"adjust_out bad reason", strings.Replace(valid, `"dispense"`, `"adjust_out","reason":"stolen"`, 1), "reason"},
		{"waste theft", strings.Replace(valid, `"dispense"`, `"waste","reason":"theft"`, 1), "reason"},
		{"dispense with reason", strings.Replace(valid, `"dispense"`, `"dispense","reason":"other"`, 1), "reason"},
		{"count without kind", strings.Replace(valid, `dispense`, `count`, 1), "count_kind"},
		{"count bad kind", strings.Replace(valid, `"dispense"`, `"count","count_kind":"annual"`, 1), "count_kind"},
		{"count bad method", strings.Replace(valid, `"dispense"`, `"count","count_kind":"cycle","count_method":"guess"`, 1), "count_method"},
		{"estimated CII count", strings.Replace(valid, `"dispense"`, `"count","count_kind":"biennial","count_method":"estimated","schedule":"CII"`, 1), "count_method"},
		{"count fields on a dispense", strings.Replace(valid, `"dispense"`, `"dispense","count_kind":"cycle"`, 1), "count_kind"},
		{"zero dispense", strings.Replace(valid, `"quantity":2`, `"quantity":"0.000"`, 1), "quantity"},
		{"negative count", strings.Replace(strings.Replace(valid, `"dispense"`, `"count","count_kind":"cycle"`, 1), `"quantity":2`, `"quantity":-1`, 1), "quantity"},
		{"ndc letters", strings.Replace(valid, `12345-6789-01`, `1234A-6789-01`, 1), "ndc"},
		{"zero quantity", strings.Replace(valid, `"quantity":2`, `"quantity":0`, 1), "quantity"},
		{"negative quantity", strings.Replace(valid, `"quantity":2`, `"quantity":-2`, 1), "quantity"},
		{"exponent quantity", strings.Replace(valid, `"quantity":2`, `"quantity":2e3`, 1), "quantity"},
		{"quantity bool", strings.Replace(valid, `"quantity":2`, `"quantity":true`, 1), "quantity"},
		{"bad unit", strings.Replace(valid, `"EA"`, `"KG"`, 1), "unit"},
		{"bad time", strings.Replace(valid, `2026-03-01T09:30:00-05:00`, `03/01/2026 09:30`, 1), "occurred_at"},
		{"future time", strings.Replace(valid, `2026-03-01T09:30:00-05:00`, `2026-03-05T09:30:00Z`, 1), "occurred_at"},
		{"ancient time", strings.Replace(valid, `2026-03-01T09:30:00-05:00`, `1999-03-05T09:30:00Z`, 1), "occurred_at"},
		{"bad schedule", strings.Replace(valid, `"unit":"EA"`, `"unit":"EA","schedule":"C2"`, 1), "schedule"},
		{"bad expiry", strings.Replace(valid, `"unit":"EA"`, `"unit":"EA","expires":"12/2027"`, 1), "expires"},
		{"rx_ref too long", strings.Replace(valid, `"unit":"EA"`, `"unit":"EA","rx_ref":"`+long+`"`, 1), "rx_ref"},
		{"222 without CII", strings.Replace(valid, `"unit":"EA"`, `"unit":"EA","dea_form_222":"123456789"`, 1), "dea_form_222"},
		{"note control char", strings.Replace(valid, `"unit":"EA"`, `"unit":"EA","note":"a\u0007b"`, 1), "note"},
		{"lot not a string", strings.Replace(valid, `"unit":"EA"`, `"unit":"EA","lot":["A"]`, 1), "lot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, es := Prepare([]byte(tt.input), store, now)
			if len(es) == 0 {
				t.Fatalf("accepted %s", tt.input)
			}
			found := false
			for _, e := range es {
				if e.Field == tt.field {
					found = true
				}
			}
			if !found {
				t.Fatalf("errors %v do not name field %q", es, tt.field)
			}
		})
	}
}

func TestPrepareReportsEveryError(t *testing.T) {
	in := `{"movement_id":"","type":"sell","ndc":"1","quantity":0,"unit":"KG","occurred_at":"yesterday","color":"red","size":1}`
	_, es := Prepare([]byte(in), store, now)
	// Unknown fields are reported by the decoder before validation runs.
	if len(es) != 2 || es[0].Field != "color" || es[1].Field != "size" {
		t.Fatalf("decode errors = %v, want color and size", es)
	}
	in = `{"movement_id":"","type":"sell","ndc":"1","quantity":0,"unit":"KG","occurred_at":"yesterday"}`
	_, es = Prepare([]byte(in), store, now)
	var got []string
	for _, e := range es {
		got = append(got, e.Field)
	}
	want := "movement_id ndc occurred_at quantity type unit"
	if strings.Join(got, " ") != want {
		t.Fatalf("fields = %v, want %s", got, want)
	}
}

func TestErrorsNeverEchoValues(t *testing.T) {
	const marker = "PATIENT-MARKER-7731"
	inputs := []string{
		strings.Replace(valid, `"unit":"EA"`, `"unit":"EA","rx_ref":"`+marker+strings.Repeat("x", 200)+`"`, 1),
		strings.Replace(valid, `"unit":"EA"`, `"unit":"EA","note":"`+marker+`\u0001"`, 1),
		strings.Replace(valid, `"unit":"EA"`, `"unit":"EA","note":"`+marker, 1),
		strings.Replace(valid, `"unit":"EA"`, `"unit":"EA","note":`+marker, 1),
		strings.Replace(valid, `"unit":"EA"`, `"unit":"`+marker+`"`, 1),
		strings.Replace(valid, `dispense`, marker, 1),
	}
	for _, in := range inputs {
		_, es := Prepare([]byte(in), store, now)
		if es == nil {
			t.Fatalf("accepted %s", in)
		}
		if strings.Contains(es.Error(), marker) {
			t.Fatalf("error text echoes the value: %v", es)
		}
	}
}

// FuzzPrepare checks that preparing any bytes reports at least one error
// or yields a canonical form that prepares to itself, and that it
// allocates within the bound (bytesPerByte a byte, plus bytesFixed).
func FuzzPrepare(f *testing.F) {
	f.Add([]byte(valid))
	f.Add([]byte(`{"movement_id":"a","type":"receive","ndc":"1234-5678-90","quantity":"0.5","unit":"ML","occurred_at":"2026-01-01T00:00:00Z","schedule":"CII","dea_form_222":"X1"}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"a":1}`))
	f.Add([]byte("{" + strings.Repeat(`"quantity":1,`, MaxMembers) + `"note":[[[[[[]]]]]]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkBound(t, data, func() { Prepare(data, store, now) })
		p, es := Prepare(data, store, now)
		if es != nil {
			if len(es) == 0 {
				t.Fatal("empty error list")
			}
			return
		}
		// A prepared movement's canonical form prepares to itself.
		q, es := Prepare(p.Payload, store, now)
		if es != nil {
			t.Fatalf("canonical form rejected: %v\n%s", es, p.Payload)
		}
		if !bytes.Equal(q.Payload, p.Payload) || q.Key != p.Key || q.Digest != p.Digest {
			t.Fatalf("canonical form is not a fixed point:\n%s\n%s", p.Payload, q.Payload)
		}
	})
}

func TestValidExpiry(t *testing.T) {
	for s, want := range map[string]bool{
		"2028-06": true, "2028-06-30": true, "": false, "2028": false, "2028-6": false, "2028-06-3": false,
		"2028-13": false, "2028-02-30": false, "12/2027": false, "2028-06-30T00:00:00Z": false, "2028-06 ": false,
	} {
		if got := validExpiry(s); got != want {
			t.Errorf("validExpiry(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestMaxCanonical: the largest canonical encoding a valid movement can
// have (every bounded field at its limit, made of a character JSON writes
// in six bytes) is within MaxCanonical, which readers of the archive
// refuse payloads above.
func TestMaxCanonical(t *testing.T) {
	wide := func(n int) string { return strings.Repeat("<", n) } // encoded as \u003c
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	m := Movement{
		MovementID: wide(maxIDLen), StoreID: strings.Repeat("S", 32), Type: TypeAdjustOut,
		NDC: "00591-0540-01", Quantity: "999999999999.999999", Unit: "EA",
		OccurredAt: "2026-03-01T11:59:59.999999999-12:00", Schedule: "CIIN", Reason: ReasonCountCorrection,
		Lot: wide(maxLotLen), Expires: "2027-12-31", RxRef: wide(maxRefLen),
		DEAForm222: strings.Repeat("9", max222Len), Note: wide(maxNoteLen),
	}
	if es := m.Validate(m.StoreID, now); es != nil {
		t.Fatalf("the widest movement does not validate: %v", es)
	}
	if n := len(m.Canonical()); n > MaxCanonical || n < 6*maxNoteLen {
		t.Errorf("the widest canonical encoding is %d bytes; MaxCanonical is %d", n, MaxCanonical)
	} else {
		t.Logf("the widest canonical encoding is %d bytes of %d", n, MaxCanonical)
	}
}
