package settings

import (
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/rxedge/agent/internal/redact"
)

// hideValues takes out of problems every value of c that may hold a
// credential, as the packages that check each section may quote it: the
// value of a password or token, and a value that looks like a URL with
// user information or that does not parse (redact.Shown). Each package
// quotes what it refuses so that a user finds it; this is the one place
// that makes sure no such quote carries a password, whichever package
// wrote it.
func hideValues(c Config, problems []string) []string {
	type hidden struct{ raw, quoted string }
	var hide []hidden
	var secrets []string
	walkFields(reflect.ValueOf(&c).Elem(), "", func(path string, v reflect.Value) {
		for _, s := range stringsOf(v) {
			shown, ok := redact.Shown(s)
			switch {
			case s == "" || ok && shown == s && !secret(path):
				continue
			case secret(path):
				hide = append(hide, hidden{s, "a value (not shown: it may be a secret)"})
			case ok:
				hide = append(hide, hidden{s, strconv.Quote(shown)})
			default:
				hide = append(hide, hidden{s, "a value (not shown: it may hold a password)"})
			}
			secrets = append(append(secrets, s), redact.Secrets(s)...)
		}
	})
	if len(hide) == 0 {
		return problems
	}
	slices.SortFunc(hide, func(a, b hidden) int { return len(b.raw) - len(a.raw) })
	out := make([]string, len(problems))
	for i, p := range problems {
		for _, h := range hide {
			p = strings.ReplaceAll(p, strconv.Quote(h.raw), h.quoted)
		}
		out[i] = redact.Text(p, secrets...)
	}
	return out
}

// stringsOf are the texts a setting holds: a string, a list's items, a
// mapping's names and values.
func stringsOf(v reflect.Value) []string {
	switch {
	case v.Kind() == reflect.String:
		return []string{v.String()}
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		return v.Interface().([]string)
	case v.Kind() == reflect.Map && v.Type().Key().Kind() == reflect.String && v.Type().Elem().Kind() == reflect.String:
		var out []string
		for k, val := range v.Interface().(map[string]string) {
			out = append(out, k, val)
		}
		return out
	}
	return nil
}
