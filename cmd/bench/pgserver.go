package main

import (
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
)

// pgServer is a PostgreSQL server the sink scenario starts for itself
// (Debian's postgresql package: initdb and pg_ctl in a temporary
// directory, loopback only; as the postgres user when run as root). The
// test kit has its own (testkit/pgtest); a benchmark ships no test rig.
type pgServer struct {
	bin, root, dir string
	port           int
	as             string
}

const pgSuperPassword = "bench-super"

var errNoPostgres = errors.New("PostgreSQL server binaries not installed (apt-get install postgresql)")

func pgBin() string {
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

func startPostgres() (*pgServer, error) {
	s := &pgServer{bin: pgBin()}
	if s.bin == "" {
		return nil, errNoPostgres
	}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			return nil, fmt.Errorf("root, and no postgres user to run the server as: %w", err)
		}
		s.as = "postgres"
	}
	var err error
	if s.root, err = os.MkdirTemp("", "rxbench-pg-"); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(s.root)
		}
	}()
	if err := os.Chmod(s.root, 0o755); err != nil {
		return nil, err
	}
	s.dir = filepath.Join(s.root, "data")
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		return nil, err
	}
	if s.as != "" {
		if err := exec.Command("chown", s.as, s.dir).Run(); err != nil {
			return nil, err
		}
	}
	pw := filepath.Join(s.root, "pw")
	if err := os.WriteFile(pw, []byte(pgSuperPassword+"\n"), 0o644); err != nil {
		return nil, err
	}
	if out, err := s.cmd("initdb", "-D", s.dir, "-U", "postgres", "--pwfile", pw, "--auth-local=trust",
		"--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c shared_buffers=256MB -c max_wal_size=4GB", s.port, s.dir)
	if out, err := s.cmd("pg_ctl", "-D", s.dir, "-l", filepath.Join(s.dir, "server.log"), "-w", "-t", "120", "-o", opts, "start").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pg_ctl start: %v\n%s", err, out)
	}
	ok = true
	return s, nil
}

func (s *pgServer) cmd(name string, args ...string) *exec.Cmd {
	path := filepath.Join(s.bin, name)
	if s.as != "" {
		return exec.Command("runuser", append([]string{"-u", s.as, "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

// superURL is the superuser's connection URL to database db.
func (s *pgServer) superURL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword("postgres", pgSuperPassword),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

func (s *pgServer) close() {
	s.cmd("pg_ctl", "-D", s.dir, "-m", "immediate", "-w", "stop").Run()
	os.RemoveAll(s.root)
}
