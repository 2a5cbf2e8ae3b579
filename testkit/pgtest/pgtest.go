// Package pgtest starts a real PostgreSQL server for a test: Debian's
// postgresql package, initdb and pg_ctl in a temporary directory,
// listening on loopback only. Run as root, the server runs as the
// postgres user (PostgreSQL refuses root). A test on a machine without the
// server binaries is skipped with the reason; CI installs them.
//
// A server can have streaming-replication standbys (pg_basebackup -R),
// which a test promotes after stopping or killing the primary.
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
	"strings"
	"syscall"
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
	// settings are extra server settings (-c name=value) of every start.
	settings []string
}

// Option changes a server before its first start.
type Option func(*Server)

// WithSetting sets a server setting (postgres -c name=value) at every
// start, e.g. WithSetting("synchronous_commit", "on"); value holds no
// spaces.
func WithSetting(name, value string) Option {
	return func(s *Server) { s.settings = append(s.settings, name+"="+value) }
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
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s, err := New(opts...)
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
func New(opts ...Option) (*Server, error) {
	s, root, err := newServer(opts)
	if err != nil {
		return nil, err
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
	if err := s.StartServer(); err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	return s, nil
}

// newServer makes the directories of a server and picks its port.
func newServer(opts []Option) (*Server, string, error) {
	bin := Bin()
	if bin == "" {
		return nil, "", ErrNoBinaries
	}
	s := &Server{bin: bin}
	for _, o := range opts {
		o(s)
	}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			return nil, "", fmt.Errorf("running as root and there is no postgres user to run the server as: %w", err)
		}
		s.as = "postgres"
	}
	root, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, "", err
	}
	if err := os.Chmod(root, 0o755); err != nil {
		return nil, "", err
	}
	s.dir, s.sock = filepath.Join(root, "data"), filepath.Join(root, "sock")
	for _, d := range []string{s.dir, s.sock} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, "", err
		}
		if s.as != "" {
			if err := exec.Command("chown", s.as, d).Run(); err != nil {
				return nil, "", fmt.Errorf("chown %s: %w", d, err)
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	return s, root, nil
}

// StartStandby makes a streaming-replication standby of s (pg_basebackup
// -R over s's socket, WAL streamed during the copy) and starts it,
// stopped when the test ends. Its WAL receiver connects with name as its
// application_name (cluster_name), the name synchronous_standby_names of
// the primary gives.
func (s *Server) StartStandby(tb testing.TB, name string, opts ...Option) *Server {
	tb.Helper()
	st, root, err := newServer(append([]Option{WithSetting("cluster_name", name), WithSetting("hot_standby", "on")}, opts...))
	if err != nil {
		tb.Fatalf("pgtest: standby: %v", err)
	}
	tb.Cleanup(st.Close)
	if out, err := st.cmd("pg_basebackup", "-D", st.dir, "-h", s.sock, "-p", strconv.Itoa(s.port), "-U", "postgres",
		"-R", "-X", "stream", "-c", "fast").CombinedOutput(); err != nil {
		os.RemoveAll(root)
		tb.Fatalf("pgtest: pg_basebackup: %v\n%s", err, out)
	}
	os.Remove(filepath.Join(st.dir, "server.log")) // the primary's, copied
	if err := st.StartServer(); err != nil {
		tb.Fatalf("pgtest: standby: %v", err)
	}
	return st
}

// WaitStreaming waits until the standby named name streams from s (and,
// with sync, is its synchronous standby), polling pg_stat_replication
// with a deadline.
func (s *Server) WaitStreaming(tb testing.TB, name string, sync bool) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var state, syncState string
	var err error
	for {
		var c *pgx.Conn
		if c, err = pgx.Connect(ctx, s.SuperURL("postgres")); err == nil {
			err = c.QueryRow(ctx, `SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1`, name).Scan(&state, &syncState)
			c.Close(ctx)
		}
		if err == nil && state == "streaming" && (!sync || syncState == "sync") {
			return
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("pgtest: standby %s not streaming (sync %v) after 2 minutes: state %q, sync_state %q, last error %v", name, sync, state, syncState, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Promote ends a standby's recovery: it becomes a primary that takes
// writes (pg_ctl promote, waiting until it does).
func (s *Server) Promote() error {
	out, err := s.cmd("pg_ctl", "-D", s.dir, "-w", "-t", "120", "promote").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl promote: %v\n%s", err, out)
	}
	return nil
}

// Kill sends SIGKILL to the server's postmaster, as a crash of its
// machine would end it, and waits until it is gone; its backends end on
// their own when they notice.
func (s *Server) Kill() error {
	b, err := os.ReadFile(filepath.Join(s.dir, "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("pgtest: kill: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return fmt.Errorf("pgtest: kill: postmaster.pid holds %q", line)
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return fmt.Errorf("pgtest: kill %d: %w", pid, err)
	}
	if err := p.Kill(); err != nil {
		return fmt.Errorf("pgtest: kill %d: %w", pid, err)
	}
	deadline := time.Now().Add(time.Minute)
	for p.Signal(syscall.Signal(0)) == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: postmaster %d alive a minute after SIGKILL", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
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
	for _, kv := range s.settings {
		opts += " -c " + kv
	}
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

// MultiURL is a connection URL for user to database db that lists every
// server, for a client that picks the one taking writes
// (target_session_attrs=read-write): a primary and its standbys.
func MultiURL(usr, password, db string, servers ...*Server) string {
	var hosts []string
	for _, s := range servers {
		hosts = append(hosts, net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)))
	}
	u := url.URL{Scheme: "postgres", Host: strings.Join(hosts, ","), Path: "/" + db,
		RawQuery: "sslmode=disable&target_session_attrs=read-write&connect_timeout=5", User: url.UserPassword(usr, password)}
	return u.String()
}
