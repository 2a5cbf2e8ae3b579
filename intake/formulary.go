package intake

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rxedge/agent/movement"
)

// MaxFormularyRows bounds the formulary file.
const MaxFormularyRows = 1 << 20

// Product is what the formulary says of one NDC.
type Product struct {
	// Schedule is the DEA schedule, "" for a drug that is not controlled.
	Schedule string
	// Unit is the unit (EA, ML, GM) every movement of the NDC must be
	// in; "" when the formulary does not say.
	Unit string
}

// Formulary maps an NDC, in its canonical form (movement.CanonicalNDC),
// to its product. Every intake reads it: the schedule of a dispense whose
// message gives none, the product a bare 10-digit NDC stands for, the
// unit a movement must be in.
type Formulary map[string]Product

var (
	schedules = map[string]bool{"CII": true, "CIIN": true, "CIII": true, "CIIIN": true, "CIV": true, "CV": true}
	units     = map[string]bool{"EA": true, "ML": true, "GM": true}
)

// LoadFormulary reads a CSV file of ndc,schedule or ndc,schedule,unit
// rows (both forms may be mixed). A first row whose first cell is "ndc" is
// a header. The NDC is in any spelling but a bare 10-digit one, which is
// ambiguous; the schedule is one of CII, CIIN, CIII, CIIIN, CIV, CV, or
// empty for a drug that is not controlled; the unit is EA, ML, GM or
// empty. Errors name the line, never a value.
func LoadFormulary(path string) (Formulary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	r.TrimLeadingSpace = true
	fm := Formulary{}
	for line := 1; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return fm, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s line %d: not valid CSV", path, line)
		}
		if line == 1 && strings.EqualFold(strings.TrimSpace(rec[0]), "ndc") {
			continue
		}
		if line > MaxFormularyRows {
			return nil, fmt.Errorf("%s: more than %d rows", path, MaxFormularyRows)
		}
		ndc, p, err := formularyRow(rec)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, line, err)
		}
		fm[ndc] = p
	}
}

// formularyRow reads one row; its errors never quote a cell.
func formularyRow(rec []string) (string, Product, error) {
	if len(rec) != 2 && len(rec) != 3 {
		return "", Product{}, errors.New("want 2 or 3 columns (ndc,schedule or ndc,schedule,unit)")
	}
	ndc, err := movement.CanonicalNDC(strings.TrimSpace(rec[0]))
	switch {
	case errors.Is(err, movement.ErrNDCAmbiguous):
		return "", Product{}, errors.New("the ndc is a bare 10-digit NDC, which is ambiguous: write it with its hyphens or as 11 digits")
	case err != nil:
		return "", Product{}, errors.New("the ndc is not an NDC")
	}
	p := Product{Schedule: strings.ToUpper(strings.TrimSpace(rec[1]))}
	if p.Schedule != "" && !schedules[p.Schedule] {
		return "", Product{}, errors.New("the schedule must be CII, CIIN, CIII, CIIIN, CIV, CV or empty")
	}
	if len(rec) == 3 {
		p.Unit = strings.ToUpper(strings.TrimSpace(rec[2]))
		if p.Unit != "" && !units[p.Unit] {
			return "", Product{}, errors.New("the unit must be EA, ML, GM or empty")
		}
	}
	return ndc, p, nil
}

// Resolve is the canonical form of ndc, in any spelling. A bare 10-digit
// NDC, ambiguous on its own, is resolved when exactly one of the products
// it may stand for (movement.NDCCandidates) is in the formulary.
func (f Formulary) Resolve(ndc string) (string, bool) {
	c, err := movement.CanonicalNDC(ndc)
	if err == nil {
		return c, true
	}
	cs, ok := movement.NDCCandidates(ndc)
	if !ok {
		return "", false
	}
	found := ""
	for _, c := range cs {
		if _, known := f[c]; known && c != found {
			if found != "" {
				return "", false // more than one: still ambiguous
			}
			found = c
		}
	}
	return found, found != ""
}

// Lookup is the product of ndc, in any spelling; known is false when the
// formulary does not list it.
func (f Formulary) Lookup(ndc string) (p Product, known bool) {
	c, ok := f.Resolve(ndc)
	if !ok {
		return Product{}, false
	}
	p, known = f[c]
	return p, known
}

// Schedule is the schedule of ndc, "" when unknown or not controlled.
func (f Formulary) Schedule(ndc string) string {
	p, _ := f.Lookup(ndc)
	return p.Schedule
}

// Prepare validates a movement an intake built or decoded, and puts it in
// the form the queue stores, as every intake does: a bare 10-digit NDC
// the formulary resolves is written in its canonical form (what was sent
// kept in ndc_as_sent); then the movement is validated; then its unit is
// checked against the formulary's for its NDC. es holds every problem
// (the unit's, of kind ErrOtherUnit, beside the validation's);
// unit is true when the only one is a unit other than the formulary's
// (HTTP answers it 422, where other problems are 400). Error texts name
// the formulary's unit, never a value sent.
func (f Formulary) Prepare(m *movement.Movement, storeID string, now time.Time) (p movement.Prepared, es movement.Errors, unit bool) {
	if _, bare := movement.NDCCandidates(m.NDC); bare {
		if c, ok := f.Resolve(m.NDC); ok {
			if m.NDCAsSent == "" {
				m.NDCAsSent = m.NDC
			}
			m.NDC = c
		}
	}
	es = m.Validate(storeID, now)
	// The unit is checked beside every other problem, so an answer lists
	// them all; a unit the validation refused is not checked again.
	if want := f[m.NDC].Unit; want != "" && m.Unit != want && !slices.ContainsFunc(es, func(e movement.FieldError) bool { return e.Field == "unit" }) {
		unit = len(es) == 0
		es = append(es, movement.FieldError{Field: "unit", Msg: "must be " + want + ", the unit the formulary gives this NDC (intake.formulary)", Kind: ErrOtherUnit})
	}
	if len(es) > 0 {
		return movement.Prepared{}, es, unit
	}
	return m.Prepared(storeID), nil, false
}

// ErrOtherUnit is the kind (movement.FieldError.Kind) of the problem of a
// movement in a unit other than the one the formulary gives its NDC.
var ErrOtherUnit = errors.New("a unit other than the formulary's")

// PrepareJSON is Prepare for a movement as JSON (movement.Decode).
func (f Formulary) PrepareJSON(data []byte, storeID string, now time.Time) (movement.Prepared, movement.Errors, bool) {
	m, es := movement.Decode(data)
	if es != nil {
		return movement.Prepared{}, es, false
	}
	return f.Prepare(m, storeID, now)
}
