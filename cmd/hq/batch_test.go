package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

// silentListener accepts connections on loopback and never answers: a
// database host that swallows what it is sent.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	})
	return l.Addr().String()
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestSinkBatchRunEndsWhenPostgresCannotBeReached runs hq sink
// --until-caught-up against a database that refuses connections, one that
// accepts them and never answers, and a real PostgreSQL that refuses TLS
// to a URL requiring it: each run ends with exit 1 and an error naming
// the connect timeout, instead of retrying for ever. The run is awaited
// with a watchdog far above the timeout, which only a run that does not
// end reaches.
func TestSinkBatchRunEndsWhenPostgresCannotBeReached(t *testing.T) {
	pg := pgtest.Start(t)
	pg.CreateDB(t, "batchend")
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := natstest.StartHub(t)
	for _, tc := range []struct{ name, url string }{
		{"refused", "postgres://u@" + closedPort(t) + "/db"},
		{"silent", "postgres://u@" + silentListener(t) + "/db"},
		{"tls refused", strings.Replace(pg.URL("postgres", "", "batchend"), "sslmode=disable", "sslmode=require", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(tc.url, "sslmode=require") && tc.name == "tls refused" {
				t.Fatalf("the test server's URL has no sslmode to change: %s", tc.url)
			}
			ended := make(chan struct{})
			var out, errs string
			var code int
			go func() {
				defer close(ended)
				out, errs, code = runCLI(t, "sink", "--until-caught-up", "--connect-timeout", "2s",
					"--postgres", tc.url, "--postgres-password-file", pw, "--server", srv.URL())
			}()
			select {
			case <-ended:
			case <-time.After(2 * time.Minute):
				t.Fatal("hq sink --until-caught-up --connect-timeout 2s did not end within 2 minutes")
			}
			if code != 1 || !strings.Contains(errs, "connect timeout") || !strings.Contains(errs, "--connect-timeout") {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit 1 and an error naming the connect timeout", code, errs, out)
			}
		})
	}
}
