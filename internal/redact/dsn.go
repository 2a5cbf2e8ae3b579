package redact

import (
	"net/url"
	"strings"
)

// DSN is a PostgreSQL connection string without credentials, in either
// form pgx and libpq take:
//
//   - a URL (postgres:// or postgresql://user:password@host/db?…) loses
//     the password of its user information (the user name stays when the
//     URL parses) and everything from the first part (between '/', '?',
//     '&', ';' and '#') that names a password on:
//     postgres://user@host/db?sslmode=require&password=REDACTED;
//   - a key=value string (host=h user=u password='p w') has the value of
//     each key whose name or value holds "password" replaced by Mask.
//
// A string that is neither (an open quote, a key that is not a word, no
// '=') loses everything from its first "password" on and, as URL does,
// everything between its scheme and its last '@'. What is left of a
// string that is not a clean URL or key=value string is scrubbed of its
// Secrets as well: where user information or a query value ends is not
// certain there (pgx ends user information at the first '@', net/url at
// the last), and no piece of a password survives either reading.
func DSN(s string) string {
	out, clean := dsn(s)
	if clean {
		return out
	}
	return Text(out, Secrets(s)...)
}

// dsn is DSN but for the last scrub; clean says the string parsed
// without doubt: a key=value string, or a URL net/url reads with at most
// one '@', in its user information.
func dsn(s string) (string, bool) {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		u, err := url.Parse(s)
		n := strings.Count(s, "@")
		return cutPassword(dsnURL(s)), err == nil && (n == 0 || n == 1 && u.User != nil)
	}
	if out, ok := scanKeywords(s, func(_, _ string) string { return Mask }); ok {
		return out, true
	}
	if i := indexFold(s, "password"); i >= 0 {
		s = s[:i] + Mask
	}
	if i := strings.LastIndex(s, "@"); i >= 0 {
		s = s[:schemeEnd(s, i)] + s[i+1:]
	}
	return s, false
}

// dsnURL is URL, but keeps the user name of a URL that parses: a
// PostgreSQL user name is not a credential, and says who could not log in.
func dsnURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		name := u.User.Username()
		u.User = nil
		if r := u.String(); !strings.Contains(r, "@") {
			if name == "" {
				return r
			}
			u.User = url.User(name)
			return u.String()
		}
	}
	return URL(s)
}

// cutPassword drops everything from the first part of a URL after its
// scheme (parts end at '/', '?', '&', ';' and '#') that names a password,
// unescaped when it can be, on. A password=… or sslpassword=… query
// parameter keeps its name. Where the user information of a URL that
// does not parse ends, or where its query starts, is not certain; the
// name of a password is.
func cutPassword(s string) string {
	for start := schemeEnd(s, len(s)); start < len(s); {
		n := strings.IndexAny(s[start:], "/?&;#")
		if n < 0 {
			n = len(s) - start
		}
		part := s[start : start+n]
		key, _, _ := strings.Cut(part, "=")
		name, inKey := passwordKey(key)
		if _, inPart := passwordKey(part); inKey || inPart {
			if name == "password" || name == "sslpassword" {
				return s[:start] + name + "=" + Mask
			}
			return s[:start] + Mask
		}
		start += n + 1
	}
	return s
}

// passwordKey reports whether a query parameter's name, its escapes
// decoded (those that are escapes: a parser may read the rest either
// way), holds "password"; name is it decoded, in lower case.
func passwordKey(key string) (name string, ok bool) {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		if key[i] == '%' && i+2 < len(key) && ishex(key[i+1]) && ishex(key[i+2]) {
			b.WriteByte(unhex(key[i+1])<<4 | unhex(key[i+2]))
			i += 2
			continue
		}
		if key[i] == '+' {
			b.WriteByte(' ')
			continue
		}
		b.WriteByte(key[i])
	}
	name = strings.ToLower(b.String())
	return name, strings.Contains(name, "password") || indexFold(key, "password") >= 0
}

func ishex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// queryPasswords are the values of s's query parameters whose names hold
// "password": each up to the next parameter, and up to the end of s.
func queryPasswords(s string) []string {
	q := strings.IndexByte(s, '?')
	if q < 0 {
		return nil
	}
	var out []string
	for start := q + 1; start < len(s); {
		n := strings.IndexAny(s[start:], "&;")
		if n < 0 {
			n = len(s) - start
		}
		key, val, ok := strings.Cut(s[start:start+n], "=")
		if _, pw := passwordKey(key); ok && pw {
			at := start + len(key) + 1
			out = append(out, val, s[at:])
			if v, _, ok := strings.Cut(val, "#"); ok {
				out = append(out, v)
			}
		}
		start += n + 1
	}
	return out
}

// keywordPasswords are the values of a key=value DSN's password keys, as
// written and unquoted; of a string that is not one, what follows each
// "password" (to the next space, and to the end).
func keywordPasswords(s string) []string {
	var out []string
	_, ok := scanKeywords(s, func(key, val string) string {
		out = append(out, val, unquote(val))
		return val
	})
	if ok {
		return out
	}
	for rest := s; ; {
		i := indexFold(rest, "password")
		if i < 0 {
			return out
		}
		rest = rest[i+len("password"):]
		v := strings.TrimLeft(rest, " \t\r\n=")
		out = append(out, v, unquote(v))
		if f := strings.Fields(v); len(f) > 0 {
			out = append(out, f[0], unquote(f[0]))
		}
	}
}

// scanKeywords reads s as a key=value connection string (libpq's syntax:
// keys are words, values are bare or in single quotes, with backslash
// escapes) and writes it again with the value of each key whose name or
// value holds "password" replaced by mask(key, value). ok is false when s
// is not such a string.
func scanKeywords(s string, mask func(key, val string) string) (out string, ok bool) {
	var b strings.Builder
	i := 0
	for {
		for i < len(s) && isSpace(s[i]) {
			b.WriteByte(s[i])
			i++
		}
		if i == len(s) {
			return b.String(), true
		}
		ks := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[ks:i]
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if !isWord(key) || i == len(s) || s[i] != '=' {
			return "", false
		}
		for i++; i < len(s) && isSpace(s[i]); i++ {
		}
		vs := i
		if i = valueEnd(s, i); i < 0 {
			return "", false
		}
		b.WriteString(s[ks:vs])
		if val := s[vs:i]; indexFold(key, "password") >= 0 || indexFold(val, "password") >= 0 {
			b.WriteString(mask(key, val))
		} else {
			b.WriteString(val)
		}
	}
}

// valueEnd is where the value starting at s[i] ends: after its closing
// quote, or at the next space; -1 for a quote that does not close.
func valueEnd(s string, i int) int {
	if i < len(s) && s[i] == '\'' {
		for i++; i < len(s); i++ {
			switch s[i] {
			case '\\':
				i++
			case '\'':
				return i + 1
			}
		}
		return -1
	}
	for ; i < len(s) && !isSpace(s[i]); i++ {
		if s[i] == '\\' {
			i++
		}
	}
	return min(i, len(s))
}

// unquote is a key=value DSN's value as libpq reads it: without its
// quotes and backslash escapes.
func unquote(v string) string {
	v = strings.TrimPrefix(v, "'")
	v = strings.TrimSuffix(v, "'")
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// isWord reports whether s is a key of a key=value DSN: letters, digits
// and '_'.
func isWord(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return s != ""
}

// indexFold is the index of the first instance of sub (ASCII, lower case)
// in s, ignoring ASCII case; -1 when there is none.
func indexFold(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		j := 0
		for j < len(sub) && lower(s[i+j]) == sub[j] {
			j++
		}
		if j == len(sub) {
			return i
		}
	}
	return -1
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
