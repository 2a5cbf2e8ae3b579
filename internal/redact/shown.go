package redact

import (
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Shown is s as a message about a setting may quote it, and whether it
// may be quoted at all. Text with no "://", no '@' and no opaque part with
// a colon (nats:u:PW) holds no URL and comes back as it is. A URL that parses with a host comes back as its
// scheme and host only (nats://u:p@h:4222/x?password=p is nats://h:4222).
// Any other text that looks like a URL may not be quoted: nothing tells a
// password in it from the rest (in nats://u:PW, with no host, PW reads as
// a port; in nats://u:p%zz@h the escape is bad), so the caller names the
// setting, or its place in a list, instead.
func Shown(s string) (string, bool) {
	scheme, rest, _ := strings.Cut(s, ":")
	if !strings.Contains(s, "://") && !strings.Contains(s, "@") && !(isScheme(scheme) && strings.Contains(rest, ":")) {
		return s, true
	}
	u, err := url.Parse(s)
	// The last '@' ends user information for some reader, even where
	// net/url ends the host before it (tls://u:p#w@h has the host u).
	if at := strings.LastIndex(s, "@"); at >= 0 && (err != nil || !strings.HasPrefix(s[at+1:], u.Host)) {
		return "", false
	}
	if err != nil || u.Scheme == "" || u.Host == "" || strings.ContainsAny(u.Host, "@,%") || !digits(u.Port()) {
		return "", false
	}
	// A host with a colon in it is an IPv6 address in brackets, or the
	// rest of user information (nats://u:PW:4222 has the host u:PW).
	if h := u.Hostname(); strings.Contains(h, ":") {
		if _, err := netip.ParseAddr(h); err != nil || !strings.HasPrefix(u.Host, "[") {
			return "", false
		}
	}
	return u.Scheme + "://" + u.Host, true
}

// digits reports whether s is empty or a port number.
func digits(s string) bool {
	if s == "" {
		return true
	}
	_, err := strconv.ParseUint(s, 10, 16)
	return err == nil
}
