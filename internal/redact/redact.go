// Package redact takes credentials out of URLs before they are shown in an
// error, a log line or a status document. It never returns credentials,
// even for a URL it cannot parse: whatever could be user information (text
// before an '@') is dropped.
package redact

import (
	"net/url"
	"strings"
)

// URL is s without credentials. A URL that parses with user information
// loses it (nats://u:p@host:4222 is nats://host:4222). One that does not
// parse, or still holds an '@' after parsing, loses everything between
// its scheme and its last '@' (nats://u:p@[bad is nats://[bad). Text
// without an '@' holds no user information and is returned as it is.
func URL(s string) string {
	if u, err := url.Parse(s); err == nil {
		u.User = nil
		if r := u.String(); !strings.Contains(r, "@") {
			return r
		}
	}
	i := strings.LastIndex(s, "@")
	if i < 0 {
		return s
	}
	scheme := ""
	if j := strings.Index(s, "://"); j >= 0 && j < i && isScheme(s[:j]) {
		scheme = s[:j+3]
	}
	return scheme + s[i+1:]
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
