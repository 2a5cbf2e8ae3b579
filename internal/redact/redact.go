// Package redact takes credentials out of what a command shows: server
// URLs and lists of them (NATS, monitoring), PostgreSQL connection strings
// (URLs and key=value DSNs), and the text of errors that quote them. It
// never returns a credential, even of a string it cannot parse: whatever
// could be user information (text before an '@' of a URL) or a password
// (the value of a password key) is dropped or replaced.
//
// Two layers use it. What a command prints about a setting goes through
// URL, URLs or DSN; an error a library returns about a connection goes
// through Error with the credentials the connection was given (Secrets
// finds them in a connection string), so a library that quotes what it
// failed on cannot echo them either.
package redact

import (
	"errors"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Mask stands where a credential was.
const Mask = "REDACTED"

// URL is s without credentials. A URL that parses with user information
// loses it (nats://u:p@host:4222 is nats://host:4222). One that does not
// parse, or still holds an '@' after parsing, loses everything between
// its scheme and its last '@' (nats://u:p@[bad is nats://[bad). Then,
// what is left of an authority whose ':' is followed by no port (digits)
// may be a user and password without a host: everything after that ':'
// goes (nats://u:p is nats://u:REDACTED). Other text without an '@'
// holds no user information and is returned as it is.
func URL(s string) string {
	r, parsed := s, false
	if u, err := url.Parse(s); err == nil {
		u.User = nil
		r = u.String()
		parsed = !strings.Contains(r, "@")
	}
	if !parsed {
		r = s
		if i := strings.LastIndex(s, "@"); i >= 0 {
			r = s[:schemeEnd(s, i)] + s[i+1:]
		}
	}
	if from, to, ok := hostlessSecret(r); ok {
		return r[:from] + Mask + r[to:]
	}
	return r
}

// hostlessSecret finds, in a "scheme://" URL whose authority holds no
// '@', what follows the authority's ':' when it is not a port (digits):
// nats://user:password, written by someone who left out "@host", where
// that text is a password. It returns its span s[from:to], which runs to
// the end of s: a password may hold a '/', a '?' or a '#'.
func hostlessSecret(s string) (from, to int, ok bool) {
	j := schemeEnd(s, len(s))
	if j == 0 {
		return 0, 0, false
	}
	end := len(s)
	if k := strings.IndexAny(s[j:], "/?#"); k >= 0 {
		end = j + k
	}
	auth := s[j:end]
	if strings.Contains(auth, "@") {
		return 0, 0, false
	}
	at := j
	if k := strings.IndexByte(auth, ']'); strings.HasPrefix(auth, "[") && k > 0 && isIP(auth[1:k]) {
		at += k + 1 // an IPv6 address's colons are not a password's
	}
	i := strings.IndexByte(s[at:end], ':')
	if i < 0 || isPort(s[at+i+1:end]) {
		return 0, 0, false
	}
	return at + i + 1, len(s), true
}

// isIP reports whether s, less a zone (%eth0), is an IP address.
func isIP(s string) bool {
	s, _, _ = strings.Cut(s, "%")
	return net.ParseIP(s) != nil
}

// isPort reports whether s is empty or decimal digits only.
func isPort(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// schemeEnd is the length of s's "scheme://" prefix when it ends before
// at, else 0.
func schemeEnd(s string, at int) int {
	if j := strings.Index(s, "://"); j >= 0 && j < at && isScheme(s[:j]) {
		return j + 3
	}
	return 0
}

// isScheme reports whether s is a URL scheme: a letter, then letters,
// digits, '+', '-' or '.'.
func isScheme(s string) bool {
	for i, r := range s {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case i > 0 && ('0' <= r && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// URLs redacts each URL of a comma-separated list, as the nats tools take
// them (nats://a:4222,nats://b:4222), and trims the space around each.
func URLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = URL(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

// Secrets are the credentials a connection string holds, for Text and
// Error to take out of what a library says about it: the user information
// of a URL, or of each URL of a comma-separated list (spans), its password (or,
// without one, the whole of it: a token); the values of password
// parameters of a URL's query; the values of password keys of a key=value
// DSN. Each comes as written and decoded, and the pieces of each a parser
// may quote alone (up to, from and between delimiters such as '/', '@'
// and ':'), but never a user name alone. It errs on the side of finding
// too much: a string that does not parse gives every part that could be
// one.
func Secrets(conn string) []string {
	var out []string
	seen := map[string]bool{"": true}
	keep := func(v string) {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	add := func(s string, split bool) {
		for _, v := range []string{s, unescape(url.PathUnescape, s), unescape(url.QueryUnescape, s)} {
			keep(v)
			if split {
				for _, p := range pieces(v) {
					keep(p)
				}
			}
		}
	}
	for _, part := range spans(conn) {
		part = strings.TrimSpace(part)
		// Parsers differ on where user information ends: at the last
		// '@' (net/url), or at the first (libpq, pgx).
		for _, at := range []int{strings.LastIndex(part, "@"), strings.Index(part, "@")} {
			if at < 0 {
				break
			}
			info := part[schemeEnd(part, at):at]
			if _, pw, ok := strings.Cut(info, ":"); ok {
				add(info, false)
				add(pw, true)
			} else {
				add(info, true)
			}
		}
		if from, to, ok := hostlessSecret(part); ok {
			add(part[from:to], true)
		}
		for _, v := range queryPasswords(part) {
			add(v, true)
		}
	}
	for _, v := range keywordPasswords(conn) {
		add(v, true)
	}
	return out
}

// maxSpanParts bounds the comma-separated parts whose runs spans joins,
// and maxRun the parts of one run: a list of servers has a few, and a
// password a comma or two.
const (
	maxSpanParts = 32
	maxRun       = 4
)

// spans are the comma-separated parts of conn, and every run of up to
// maxRun consecutive parts that holds at most one "://": a comma inside a
// password splits a URL in two (nats://u:pa,ss@h), and a parser shows the
// first half as a URL of its own. A run over two URLs is no URL; conn
// itself comes when it is one part or such a run.
func spans(conn string) []string {
	parts := strings.Split(conn, ",")
	if len(parts) > maxSpanParts {
		return append([]string{conn}, parts...)
	}
	var out []string
	for i := range parts {
		for j := i + 1; j <= min(len(parts), i+maxRun); j++ {
			run := strings.Join(parts[i:j], ",")
			if j > i+1 && strings.Count(run, "://") > 1 {
				break
			}
			out = append(out, run)
		}
	}
	return out
}

// unescape is s decoded by decode, or "" when it does not decode.
func unescape(decode func(string) (string, error), s string) string {
	d, err := decode(s)
	if err != nil {
		return ""
	}
	return d
}

// maxPieces bounds the pieces taken of one secret: a connection string
// has a few delimiters, and Text's work grows with the pieces.
const maxPieces = 64

// pieces are the parts of s a parser may quote alone: up to a delimiter,
// from one, and between two.
func pieces(s string) []string {
	var at []int
	for i := 0; i < len(s) && len(at) < maxPieces/3; i++ {
		if strings.IndexByte(delimiters, s[i]) >= 0 {
			at = append(at, i)
		}
	}
	var out []string
	for k, i := range at {
		out = append(out, s[:i], s[i+1:])
		if k > 0 {
			out = append(out, s[at[k-1]+1:i])
		}
	}
	if len(at) > 0 {
		out = append(out, s[at[len(at)-1]+1:])
	}
	return out
}

// delimiters end a part of a URL or a DSN, where a parser's quote of it
// may end.
const delimiters = "/?#&;@:, '\"\t\r\n"

// Text is text with every secret replaced by Mask, in each form an error
// may quote it: as it is, escaped as Go's %q escapes it (url.Error does),
// and percent-escaped as a URL's path, query or user information holds
// it. Longer secrets go first, so none leaves a piece of another behind.
// An empty secret is ignored; one of one or two bytes is replaced only
// where it stands alone (no letter or digit on either side), so that a
// piece such as "p" does not take every p out of the text.
func Text(text string, secrets ...string) string {
	forms := make([]string, 0, 5*len(secrets))
	for _, s := range secrets {
		if s == "" {
			continue
		}
		q := strconv.Quote(s)
		forms = append(forms, s, q[1:len(q)-1], url.PathEscape(s), url.QueryEscape(s), url.UserPassword("", s).String()[1:])
	}
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	for _, f := range forms {
		switch {
		case len(f) > 2:
			text = strings.ReplaceAll(text, f, Mask)
		case f != "":
			text = replaceAlone(text, f)
		}
	}
	return text
}

// replaceAlone replaces each instance of f in text that has no letter or
// digit on either side by Mask.
func replaceAlone(text, f string) string {
	var b strings.Builder
	for {
		i := strings.Index(text, f)
		if i < 0 {
			b.WriteString(text)
			return b.String()
		}
		end := i + len(f)
		if (i == 0 || !alnum(text[i-1])) && (end == len(text) || !alnum(text[end])) {
			b.WriteString(text[:i])
			b.WriteString(Mask)
		} else {
			b.WriteString(text[:end])
		}
		text = text[end:]
	}
}

func alnum(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' }

// Error is err with every secret taken out of its text (Text); errors.Is
// and errors.As still see err and what it wraps, whose own texts are not
// scrubbed: print the returned error, never one taken out of it. An err
// whose text holds no secret is returned as it is.
func Error(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	t := err.Error()
	if s := Text(t, secrets...); s != t {
		return &scrubbed{text: s, err: err}
	}
	return err
}

// scrubbed is an error shown without its secrets.
type scrubbed struct {
	text string
	err  error
}

func (e *scrubbed) Error() string { return e.text }
func (e *scrubbed) Unwrap() error { return e.err }

// ParseError is why net/url could not parse raw, told without raw: the
// URL a *url.Error quotes is left out, an invalid %-escape (whose text
// would show three characters of what may be a password) is said in
// words, and anything else is scrubbed of raw's Secrets. errors.As still
// finds the *url.Error.
func ParseError(err error, raw string) error {
	var ee url.EscapeError
	if errors.As(err, &ee) {
		return &scrubbed{text: "a '%' that does not start an escape such as %40 (write a '%' in a password as %25)", err: err}
	}
	var ue *url.Error
	if !errors.As(err, &ue) {
		return Error(err, Secrets(raw)...)
	}
	return &scrubbed{text: Text(ue.Err.Error(), Secrets(raw)...), err: err}
}
