// Package listen holds the rule every network listener of the agent
// follows (DESIGN P7): its address is host:port with a numeric port, on a
// loopback address unless something guards it (a bearer token, a list of
// allowed senders), and a bearer token is at least MinTokenLen
// characters. Each listener's settings name their fields with it; the rule
// is written here once.
package listen

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/rxedge/agent/internal/secret"
)

// MinTokenLen is the shortest bearer token a listener takes.
const MinTokenLen = 16

// Rule is how one listener's address setting is named in problems.
type Rule struct {
	// Field is the setting, e.g. "ingest.listen".
	Field string
	// Example follows "must be host:port, e.g. ", e.g.
	// `127.0.0.1:8717, or "off"`.
	Example string
	// Guard says what makes a non-loopback address acceptable; it follows
	// "ADDR is not a loopback address: ", e.g. "also set
	// ingest.token_file so that only the store's software can submit".
	Guard string
}

// Check returns the problem with addr, nil when there is none. guarded
// says that what Rule.Guard asks for is set.
func (r Rule) Check(addr string, guarded bool) error {
	host, port, err := net.SplitHostPort(addr)
	switch {
	case err != nil:
		return fmt.Errorf("%s: must be host:port, e.g. %s", r.Field, r.Example)
	case !validPort(port):
		return fmt.Errorf("%s: the port is not a number", r.Field)
	case !Loopback(host) && !guarded:
		return fmt.Errorf("%s: %s is not a loopback address: %s", r.Field, addr, r.Guard)
	}
	return nil
}

func validPort(p string) bool {
	_, err := strconv.ParseUint(p, 10, 16)
	return err == nil
}

// Loopback reports whether host (the host part of a listen address) is
// localhost or a loopback IP address.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Token is the bearer token of the listener whose settings are
// section.token and section.token_file: the token itself, or the content
// file's first line (read as every secret file is, secret.ReadFile;
// surrounding white space trimmed), with the problem, naming
// its field, when there is one. A problem never shows the token.
func Token(section, value, file string) (string, error) {
	switch {
	case value != "" && file != "":
		return "", fmt.Errorf("%s.token: set %s.token or %s.token_file, not both", section, section, section)
	case file != "":
		line, err := secret.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%s.token_file: %v", section, err)
		}
		t := strings.TrimSpace(line) // a token holds no white space
		if len(t) < MinTokenLen {
			return t, fmt.Errorf("%s.token_file: the token in %s is shorter than %d characters", section, file, MinTokenLen)
		}
		return t, nil
	case value != "" && len(value) < MinTokenLen:
		return value, fmt.Errorf("%s.token: is shorter than %d characters", section, MinTokenLen)
	}
	return value, nil
}
