package redact

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestURL(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"user and password", "nats://u:p@host:4222", "nats://host:4222"},
		{"token", "tls://tok@h", "tls://h"},
		{"no credentials", "nats://central.example:4222", "nats://central.example:4222"},
		{"https with path", "https://admin:pw@mon.example:8222/jsz?acc=1", "https://mon.example:8222/jsz?acc=1"},
		{"unparsable host", "nats://u:p@[bad", "nats://[bad"},
		{"unparsable port", "nats://u:p@host:port", "nats://host:" + Mask},
		{"password with a slash", "nats://u:p/w@host:4222", "nats://host:4222"},
		{"password with a question mark", "nats://u:p?w@host:4222", "nats://host:4222"},
		{"password with a hash", "nats://u:p#w@host:4222", "nats://host:4222"},
		{"escaped at sign", "nats://u%40x:p@host:4222", "nats://host:4222"},
		{"no scheme", "u:p@host:4222", "host:4222"},
		{"opaque", "nats:u:p@host", "host"},
		{"two at signs", "nats://a@b:c@host", "nats://host"},
		{"bad escape", "nats://u:p%zz@host", "nats://host"},
		{"garbage", "%%%", "%%%"},
		{"garbage with at", "%%u:p@%%", "%%"},
		{"at at the end", "nats://u:p@", "nats:"},
		{"empty", "", ""},
		{"control character", "nats://u:p@ho\x7fst", "nats://ho\x7fst"},
		{"no host", "nats://ops:S3cretPW", "nats://ops:" + Mask},
		{"no host, a slash in the password", "nats://ops:S3c/ret?x#y", "nats://ops:" + Mask},
		{"no host, no user", "nats://:S3cretPW", "nats://:" + Mask},
		{"host and port", "nats://central:4222/x", "nats://central:4222/x"},
		{"host and empty port", "nats://central:", "nats://central:"},
		{"IPv6 and port", "nats://[::1]:4222", "nats://[::1]:4222"},
		{"IPv6 and no port", "nats://[::1]:pw", "nats://[::1]:" + Mask},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := URL(tt.in); got != tt.want {
				t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestURLs(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"list", "nats://u:p@a:4222, tls://tok@b:4222,nats://c:4222", "nats://a:4222,tls://b:4222,nats://c:4222"},
		{"list with a bad one", "nats://u:p@[bad,nats://x:y@ok:4222", "nats://[bad,nats://ok:4222"},
		{"one", "nats://u:p@host:4222", "nats://host:4222"},
		{"empty items", "nats://u:p@a,,", "nats://a,,"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := URLs(tt.in); got != tt.want {
				t.Errorf("URLs(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// FuzzURL checks that no input gives back what stands before its '@'
// (where user information is): a marker put there never comes out.
func FuzzURL(f *testing.F) {
	for _, s := range [][2]string{{"nats://", "host:4222"}, {"nats://u:", "[bad"}, {"tls://", "h"}, {"a@", "c"}, {"", "h/p?q#f"}, {"@://", ""}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, before, after string) {
		if strings.Contains(before+after, marker) {
			return // the marker would stand elsewhere too
		}
		s := before + marker + "@" + after
		got := URL(s)
		if strings.Contains(got, "@") {
			t.Errorf("URL(%q) = %q keeps an '@'", s, got)
		}
		if strings.Contains(got, marker) {
			t.Errorf("URL(%q) = %q keeps what stands before the '@'", s, got)
		}
		// A user and password without a host (nats://u:p): whatever
		// stands after the authority's ':' may be a password.
		if strings.ContainsAny(before, "/?#") {
			return
		}
		s = "nats://" + before + ":" + marker + after
		if got := URL(s); strings.Contains(got, marker) {
			t.Errorf("URL(%q) = %q keeps what stands after the ':'", s, got)
		}
	})
}

func TestDSN(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"url with a password", "postgres://sink:pw@db.example:5432/rx?sslmode=require", "postgres://sink@db.example:5432/rx?sslmode=require"},
		{"url without credentials", "postgres://db.example/rx", "postgres://db.example/rx"},
		{"postgresql scheme", "postgresql://u:pw@h/d", "postgresql://u@h/d"},
		{"password in the query", "postgres://u@h/d?sslmode=require&password=pw&application_name=x", "postgres://u@h/d?sslmode=require&password=REDACTED"},
		{"escaped password key", "postgres://h/d?pass%77ord=pw", "postgres://h/d?password=REDACTED"},
		{"sslpassword", "postgres://h/d?sslpassword=pw", "postgres://h/d?sslpassword=REDACTED"},
		{"escaped password key, bad escape in the value", "postgres://h/d?pass%77ord=p%zzw", "postgres://h/d?password=REDACTED"},
		{"password in a fragment after the query", "postgres://h/d?x=1#password=pw", "postgres://h/d?x=1#password=REDACTED"},
		{"multiple hosts", "postgres://u:pw@h1:5432,h2:5433/d?target_session_attrs=read-write", "postgres://u@h1:5432,h2:5433/d?target_session_attrs=read-write"},
		{"unparsable host", "postgres://u:pw@[bad/d", "postgres://[bad/d"},
		{"bad escape", "postgres://u:p%zz@127.0.0.1/d", "postgres://127.0.0.1/d"},
		{"at in the password", "postgres://u:p@ss@h/d", "postgres://u@h/d"},
		{"unparsable with a query password", "postgres://[bad/d?password=pw", "postgres://[bad/d?password=REDACTED"},
		{"keywords", "host=h port=5432 user=u password=pw dbname=d", "host=h port=5432 user=u password=REDACTED dbname=d"},
		{"keywords quoted", "host=h password='p w\\' x' sslmode=require", "host=h password=REDACTED sslmode=require"},
		{"keywords spaced", "host = h password = pw", "host = h password = REDACTED"},
		{"keywords sslpassword", "sslkey=/k sslpassword=pw", "sslkey=/k sslpassword=REDACTED"},
		{"keywords, a value naming a password", "options='-c password=pw' host=h", "options=REDACTED host=h"},
		{"keywords, open quote", "host=h password='pw", "host=h REDACTED"},
		{"keywords, no equals", "host=h password pw", "host=h REDACTED"},
		{"not a dsn", "u:pw@h", "h"},
		{"an at in a query password", "postgres://h/d?password=pw@S3cret&sslmode=bogus", "postgres://REDACTED"},
		{"an at in the password, as pgx reads it", "postgres://u:pw@S3cret@[bad/d", "postgres://[bad/d"},
		{"a mistyped scheme", "postgress://u:pw@h/d?password=pw", "postgress://h/d?REDACTED"},
		{"empty", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := DSN(tt.in); got != tt.want {
				t.Errorf("DSN(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestError takes the credentials of a connection string out of what the
// parsers say about it, in each form they quote it.
func TestError(t *testing.T) {
	for _, conn := range []string{
		"nats://u:S3cret%zz@host:4222",
		"nats://u:S3cret@[bad",
		"nats://tok-S3cret@host:port",
		"nats://a:4222, nats://u:S3cret\"q@[b",
		"postgres://u:S3cret@[bad/d",
		"postgres://h/d?password=S3cret%zz",
	} {
		t.Run(conn, func(t *testing.T) {
			for _, in := range strings.Split(conn, ",") {
				_, perr := url.Parse(strings.TrimSpace(in))
				if perr == nil {
					continue
				}
				wrapped := fmt.Errorf("connect: %w", perr)
				err := Error(wrapped, Secrets(conn)...)
				if strings.Contains(err.Error(), "S3cret") {
					t.Errorf("Error(%q) = %q", wrapped, err)
				}
				var ue *url.Error
				if !errors.As(err, &ue) {
					t.Errorf("errors.As no longer finds the *url.Error in %v", err)
				}
			}
		})
	}
	plain := errors.New("dial tcp 127.0.0.1:4222: connection refused")
	if got := Error(plain, "S3cret"); got != plain {
		t.Errorf("an error without a secret is changed: %v", got)
	}
	if got := Text(`pw "a\"b", a%22b`, `a"b`); strings.Contains(got, "a") {
		t.Errorf("a quoted or escaped secret is left: %q", got)
	}
}

// marker stands in the fuzz tests where a credential is.
const marker = "SECRETX"

// FuzzDSN checks that no PostgreSQL connection string gives back its
// password: a marker put after "password=" (a key=value DSN, a URL's
// query) or between a URL's ':' and '@' never comes out.
func FuzzDSN(f *testing.F) {
	for _, s := range [][2]string{{"host=h ", " dbname=d"}, {"host='", "'"}, {"a=b\\", ""}, {"", "&x=1"}, {"u", "h:5432/d"}, {"#", ""}, {"x=1;", "@h"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, before, after string) {
		if strings.Contains(before+after, marker) {
			return
		}
		for _, s := range []string{
			"postgres://" + before + ":" + marker + "@" + after,
			"postgres://h/d?" + before + "password=" + marker + after,
			"postgres://h/d?" + before + "pass%77ord=" + marker + after,
			strings.TrimPrefix(strings.TrimPrefix(before, "postgres://"), "postgresql://") + "password=" + marker + after,
		} {
			if got := DSN(s); strings.Contains(got, marker) {
				t.Errorf("DSN(%q) = %q keeps the password", s, got)
			}
		}
	})
}

// FuzzErrorText checks that the error texts of the parsers a command
// hands a connection string to (net/url's, as nats.go and the monitoring
// client use it; pgx's) keep no credential once Error has scrubbed them
// with the string's Secrets.
func FuzzErrorText(f *testing.F) {
	for _, s := range [][2]string{{"nats://u:", "[bad"}, {"nats://u:p%zz", "h:4222"}, {"postgres://u:", "[bad/d"}, {"postgres://u:%", "h/d"},
		{"host='", ""}, {"host=h port=x ", ""}, {"nats://a:4222,nats://", "b:port"}, {"nats://ops:", ""}, {"http://sys:", "/varz"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, before, after string) {
		if strings.Contains(before+after, marker) || strings.ContainsAny(before+after, "/\\") && strings.Contains(strings.ToLower(before+after), "ssl") ||
			strings.Contains(strings.ToLower(before+after), "file") || strings.Contains(strings.ToLower(before+after), "service") {
			return // pgx would read files the input names
		}
		kv := strings.TrimPrefix(strings.TrimPrefix(before, "postgres://"), "postgresql://")
		cases := []string{before + marker + "@" + after, "postgres://h/d?" + before + "password=" + marker + after, kv + "password=" + marker + after}
		if !strings.ContainsAny(before, "@/?#,") {
			cases = append(cases, "nats://"+before+":"+marker+after) // a user and password without a host
		}
		for _, s := range cases {
			var errs []error
			for _, part := range strings.Split(s, ",") {
				if _, err := url.Parse(strings.TrimSpace(part)); err != nil {
					errs = append(errs, err)
				}
			}
			if _, err := pgconn.ParseConfig(s); err != nil {
				errs = append(errs, err)
			}
			for _, err := range errs {
				if got := Error(fmt.Errorf("connect: %w", err), Secrets(s)...).Error(); strings.Contains(got, marker) {
					t.Errorf("the error about %q keeps the credential: %q", s, got)
				}
			}
		}
	})
}

// TestParseError says why net/url refused a URL without a piece of its
// password, an invalid escape's three characters included.
func TestParseError(t *testing.T) {
	for _, raw := range []string{"nats://u:S3cret%zz@h:4222", "nats://u:S3cret@[bad", "http://S3cret@h:port", "nats://u:S3c\x7fret@h", "nats://ops:S3cretPW", "http://sys:S3cretPW/varz"} {
		_, perr := url.Parse(raw)
		if perr == nil {
			t.Fatalf("%q parses", raw)
		}
		err := ParseError(perr, raw)
		if strings.Contains(err.Error(), "S3c") || strings.Contains(err.Error(), "zz") || err.Error() == "" {
			t.Errorf("ParseError(%q) = %q", raw, err)
		}
		var ue *url.Error
		if !errors.As(err, &ue) {
			t.Errorf("errors.As no longer finds the *url.Error in %v", err)
		}
	}
}
