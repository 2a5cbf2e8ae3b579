package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/rxedge/agent/hub"
)

// The central scenario runs central in a process of its own, this binary
// with -central-server DIR, so that its memory is the server's alone, and
// so that it can be killed with SIGKILL and started again on the same
// directory. The child starts a hub (an embedded nats-server, JetStream
// on DIR) on a free loopback port without provisioning anything, writes
// one JSON line (serverHello) to stdout once it accepts clients, and then
// answers commands read from stdin, one a line:
//
//	mem   two GCs, then one JSON line of runtime.MemStats figures (serverMem)
//	stop  a clean shutdown; so does the end of stdin
type serverHello struct {
	URL string `json:"url"`
	// StartS is how long hub.Start took: the server ready for clients,
	// JetStream enabled, every stream on DIR recovered.
	StartS float64 `json:"start_s"`
}

type serverMem struct {
	HeapAlloc uint64 `json:"heap_alloc"`
	HeapInuse uint64 `json:"heap_inuse"`
	Sys       uint64 `json:"sys"`
}

// serverStartTimeout bounds a start of the child's server; recovering a
// stream of ten million subjects after a SIGKILL takes a while.
const serverStartTimeout = 15 * time.Minute

// centralServerChild is the child process.
func centralServerChild(dir string, noSync bool, stdin io.Reader, stdout io.Writer) error {
	t0 := time.Now()
	h, err := hub.Start(hub.Options{
		Listen: "127.0.0.1:0", StoreDir: dir, NoSync: noSync,
		StartTimeout: serverStartTimeout,
	})
	if err != nil {
		return err
	}
	defer h.Shutdown()
	enc := json.NewEncoder(stdout)
	if err := enc.Encode(serverHello{URL: h.URL(), StartS: time.Since(t0).Seconds()}); err != nil {
		return err
	}
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		switch strings.TrimSpace(sc.Text()) {
		case "mem":
			// Twice: what sync.Pools hold (the server pools its block
			// buffers) survives one collection.
			runtime.GC()
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if err := enc.Encode(serverMem{HeapAlloc: m.HeapAlloc, HeapInuse: m.HeapInuse, Sys: m.Sys}); err != nil {
				return err
			}
		case "stop":
			return nil
		}
	}
	return sc.Err()
}

// serverProc is a running child server.
type serverProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr *bytes.Buffer
	hello  serverHello
	// up is the time from the start of the process to its hello.
	up time.Duration
}

// startServerProc starts a child server on dir and waits for its hello.
func startServerProc(ctx context.Context, dir string, noSync bool) (*serverProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"-central-server", dir}
	if noSync {
		args = append(args, "-central-nosync")
	}
	cmd := exec.Command(exe, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &serverProc{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), stderr: &errb}
	type result struct {
		line []byte
		err  error
	}
	got := make(chan result, 1)
	go func() {
		line, err := p.out.ReadBytes('\n')
		got <- result{line, err}
	}()
	select {
	case r := <-got:
		if r.err == nil {
			r.err = json.Unmarshal(r.line, &p.hello)
		}
		if r.err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, fmt.Errorf("central server on %s: %w: %s", dir, r.err, strings.TrimSpace(errb.String()))
		}
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, ctx.Err()
	}
	p.up = time.Since(t0)
	return p, nil
}

func (p *serverProc) url() string { return p.hello.URL }
func (p *serverProc) pid() int    { return p.cmd.Process.Pid }

// mem asks the child for its heap after a GC.
func (p *serverProc) mem() (serverMem, error) {
	var m serverMem
	if _, err := io.WriteString(p.stdin, "mem\n"); err != nil {
		return m, err
	}
	line, err := p.out.ReadBytes('\n')
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(line, &m)
}

// stop shuts the child down cleanly and waits for it to exit.
func (p *serverProc) stop() error {
	_, _ = io.WriteString(p.stdin, "stop\n")
	_ = p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("central server: %w: %s", err, strings.TrimSpace(p.stderr.String()))
		}
		return nil
	case <-time.After(5 * time.Minute):
		_ = p.cmd.Process.Kill()
		<-done
		return errors.New("central server: no clean shutdown within 5 minutes; killed")
	}
}

// kill kills the child at once (SIGKILL where there are signals) and
// waits for it to be gone.
func (p *serverProc) kill() error {
	if err := p.cmd.Process.Kill(); err != nil {
		return err
	}
	_ = p.cmd.Wait()
	return nil
}

// rss is the child's resident set (VmRSS), in bytes; it fails where there
// is no /proc.
func (p *serverProc) rss() (float64, error) {
	st, err := procStatusOf(strconv.Itoa(p.pid()))
	if err != nil {
		return 0, err
	}
	v, ok := st["VmRSS"]
	if !ok {
		return 0, errors.New("no VmRSS in /proc status")
	}
	return v * (1 << 20), nil
}

// cpuSeconds is the user and system CPU time the child has used, from
// /proc/<pid>/stat; it fails where there is no /proc.
func (p *serverProc) cpuSeconds() (float64, error) { return procCPUSeconds(strconv.Itoa(p.pid())) }

// procCPUSeconds is the user and system CPU time of process pid ("self"
// for this one), from /proc/<pid>/stat.
func procCPUSeconds(pid string) (float64, error) {
	data, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from the last ")".
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("unreadable /proc stat")
	}
	f := strings.Fields(s[i+1:])
	// utime and stime are fields 14 and 15 of stat, 12 and 13 after ")".
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("unreadable /proc stat times")
	}
	// Clock ticks: 100 per second on every Linux the bench runs on.
	return (ut + st) / 100, nil
}
