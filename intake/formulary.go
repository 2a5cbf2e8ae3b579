package intake

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// MaxFormularyRows bounds the formulary file.
const MaxFormularyRows = 1 << 20

// Formulary maps an NDC (as 11 digits) to its DEA schedule.
type Formulary map[string]string

var schedules = map[string]bool{"CII": true, "CIIN": true, "CIII": true, "CIIIN": true, "CIV": true, "CV": true}

// LoadFormulary reads a CSV file of ndc,schedule rows. A first row whose
// first cell is "ndc" is a header. The schedule is one of CII, CIIN,
// CIII, CIIIN, CIV, CV, or empty for a drug that is not controlled.
// Errors name the line, never a value.
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
		if len(rec) != 2 {
			return nil, fmt.Errorf("%s line %d: want 2 columns (ndc,schedule)", path, line)
		}
		ndc, ok := NDC11(rec[0])
		if !ok {
			return nil, fmt.Errorf("%s line %d: the ndc is not an NDC", path, line)
		}
		s := strings.ToUpper(strings.TrimSpace(rec[1]))
		if s != "" && !schedules[s] {
			return nil, fmt.Errorf("%s line %d: the schedule must be CII, CIIN, CIII, CIIIN, CIV, CV or empty", path, line)
		}
		fm[ndc] = s
	}
}

// Schedule is the schedule of ndc, "" when unknown or not controlled.
func (f Formulary) Schedule(ndc string) string {
	if f == nil {
		return ""
	}
	k, ok := NDC11(ndc)
	if !ok {
		return ""
	}
	return f[k]
}

// NDC11 is an NDC as its 11 digits (5-4-2): a hyphenated 10-digit form is
// padded in the short group; 11 digits, with or without hyphens, are kept.
// A bare 10-digit NDC is ambiguous and refused.
func NDC11(s string) (string, bool) {
	s = strings.TrimSpace(s)
	parts := strings.Split(s, "-")
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return "", false
		}
	}
	switch {
	case len(parts) == 1 && len(s) == 11:
		return s, true
	case len(parts) == 3:
		a, b, c := parts[0], parts[1], parts[2]
		switch {
		case len(a) == 5 && len(b) == 4 && len(c) == 2:
		case len(a) == 4 && len(b) == 4 && len(c) == 2:
			a = "0" + a
		case len(a) == 5 && len(b) == 3 && len(c) == 2:
			b = "0" + b
		case len(a) == 5 && len(b) == 4 && len(c) == 1:
			c = "0" + c
		default:
			return "", false
		}
		return a + b + c, true
	}
	return "", false
}
