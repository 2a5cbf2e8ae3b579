// Command agent is the RxEdge edge agent: `agent run` runs it (in the
// foreground or as the system service); the other subcommands operate on a
// running or stopped agent. See `agent help` and the README.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	args := os.Args[1:]
	ctx, stop := context.Background(), func() {}
	if !ownsSignals(args) {
		ctx, stop = interruptContext(ctx)
	}
	err := run(ctx, args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// ownSignals annotates a command that handles SIGINT and SIGTERM itself:
// `agent run`, through installer.Run, which also answers the Windows
// service control manager.
const ownSignals = "rxedge/own-signals"

// ownsSignals reports whether args select a command marked ownSignals.
// Such a command must get a context no signal handler cancels, and no
// handler of main's may catch its signals, or a second Ctrl-C would not
// end it at once.
func ownsSignals(args []string) bool {
	c, _, err := newRoot(&streams{in: strings.NewReader(""), out: io.Discard, err: io.Discard}).Find(args)
	return err == nil && c.Annotations[ownSignals] != ""
}

// interruptContext is cancelled by the first SIGINT or SIGTERM. That also
// releases the signals, so a second one ends the process at once.
func interruptContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	return ctx, stop
}

// run executes the command line args and returns its error; main turns it
// into the exit code, so the whole CLI can be tested with buffers.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	root := newRoot(&streams{in: stdin, out: stdout, err: stderr})
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return checkUsage(args, stdout, root.ExecuteContext(ctx))
}

// Exit codes (DESIGN §7).
const (
	exitOK        = 0
	exitError     = 1
	exitUsage     = 2
	exitAttention = 3 // `agent status`: quarantined or old pending movements
)

// exitErr carries an exit code; its message, if any, is printed.
type exitErr struct {
	code int
	msg  string
	// plugin marks the answer of `status --check`, whose exit code is the
	// plugin contract's (2 is CRITICAL there, not a usage error).
	plugin bool
}

func (e *exitErr) Error() string { return e.msg }

func usageError(format string, args ...any) error {
	return &exitErr{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var e *exitErr
	if errors.As(err, &e) {
		if e.msg != "" {
			fmt.Fprintln(stderr, "agent:", e.msg)
		}
		return e.code
	}
	fmt.Fprintln(stderr, "agent:", err)
	return exitError
}
