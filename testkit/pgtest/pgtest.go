// Package pgtest starts a real PostgreSQL server for a test: Debian's
// postgresql package, initdb and pg_ctl in a temporary directory,
// listening on loopback only. Run as root, the server runs as the
// postgres user (PostgreSQL refuses root). A test on a machine without the
// server binaries is skipped with the reason; CI installs them.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// SuperPassword is the test server's superuser (postgres) password.
const SuperPassword = "pgtest-super"

// Server is a PostgreSQL server a test started.
type Server struct {
	bin  string
	dir  string // data directory
	sock string
	port int
	as   string // run as this user ("" when not root)
}

// Bin finds the server binaries, or "" when they are not installed.
func Bin() string {
	if d := os.Getenv("RXEDGE_PG_BIN"); d != "" {
		return d
	}
	ms, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(ms) == 0 {
		return ""
	}
	sort.Slice(ms, func(i, j int) bool {
		a, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(ms[i]))))
		b, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(ms[j]))))
		return a > b
	})
	return filepath.Dir(ms[0])
}

// Start initialises and starts a server, stopped when the test ends; it
// skips the test when the binaries are absent.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := New()
	if err == ErrNoBinaries {
		tb.Skip("pgtest: PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin (apt-get install postgresql)")
	}
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

// ErrNoBinaries: PostgreSQL's server binaries are not installed.
var ErrNoBinaries = errors.New("PostgreSQL server binaries not installed (apt-get install postgresql)")

// New starts a server, as Start does, for a program that is not a test
// (the bench); the caller closes it.
func New() (*Server, error) {
	bin := Bin()
	if bin == "" {
		return nil, ErrNoBinaries
	}
	s := &Server{bin: bin}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			return nil, fmt.Errorf("running as root and there is no postgres user to run the server as: %w", err)
		}
		s.as = "postgres"
	}
	root, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(root, 0o755); err != nil {
		return nil, err
	}
	s.dir, s.sock = filepath.Join(root, "data"), filepath.Join(root, "sock")
	for _, d := range []string{s.dir, s.sock} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
		if s.as != "" {
			if err := exec.Command("chown", s.as, d).Run(); err != nil {
				return nil, fmt.Errorf("chown %s: %w", d, err)
			}
		}
	}
	pw := filepath.Join(root, "pw")
	if err := os.WriteFile(pw, []byte(SuperPassword+"\n"), 0o644); err != nil {
		return nil, err
	}
	if out, err := s.cmd("initdb", "-D", s.dir, "-U", "postgres", "--pwfile", pw,
		"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C").CombinedOutput(); err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	os.Remove(pw)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	if err := s.StartServer(); err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	return s, nil
}

func (s *Server) cmd(name string, args ...string) *exec.Cmd {
	path := filepath.Join(s.bin, name)
	if s.as != "" {
		return exec.Command("runuser", append([]string{"-u", s.as, "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

// StartServer starts the (stopped) server and waits until it accepts
// connections.
func (s *Server) StartServer() error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=60 -c shared_buffers=128MB -c max_wal_size=2GB", s.port, s.sock)
	out, err := s.cmd("pg_ctl", "-D", s.dir, "-l", filepath.Join(s.dir, "server.log"), "-w", "-t", "120", "-o", opts, "start").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl start: %v\n%s", err, out)
	}
	return nil
}

// Stop stops the server with pg_ctl's shutdown mode: "fast" (clients
// disconnected, a clean shutdown) or "immediate" (no checkpoint: the next
// start recovers from the WAL, as after a crash).
func (s *Server) Stop(mode string) error {
	out, err := s.cmd("pg_ctl", "-D", s.dir, "-m", mode, "-w", "-t", "120", "stop").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl stop -m %s: %v\n%s", mode, err, out)
	}
	return nil
}

// Restart stops the server with mode and starts it again.
func (s *Server) Restart(mode string) error {
	if err := s.Stop(mode); err != nil {
		return err
	}
	return s.StartServer()
}

// Close stops the server and removes its files.
func (s *Server) Close() {
	s.Stop("immediate")
	os.RemoveAll(filepath.Dir(s.dir))
}

// Port is the server's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// URL is a connection URL for user (with password) to database db, over
// TCP on loopback, which authenticates with SCRAM.
func (s *Server) URL(usr, password, db string) string {
	u := url.URL{Scheme: "postgres", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), Path: "/" + db,
		RawQuery: "sslmode=disable"}
	if password != "" {
		u.User = url.UserPassword(usr, password)
	} else {
		u.User = url.User(usr)
	}
	return u.String()
}

// SuperURL is URL for the superuser.
func (s *Server) SuperURL(db string) string { return s.URL("postgres", SuperPassword, db) }

// Exec runs SQL as the superuser in db.
func (s *Server) Exec(tb testing.TB, db, sql string, args ...any) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.SuperURL(db))
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
}

// CreateDB creates a database owned by the superuser and returns its name.
func (s *Server) CreateDB(tb testing.TB, name string) string {
	tb.Helper()
	s.Exec(tb, "postgres", "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return name
}
