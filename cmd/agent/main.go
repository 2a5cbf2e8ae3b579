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
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(exitCode(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr), os.Stderr))
}

// run executes the command line args and returns its error; main turns it
// into the exit code, so the whole CLI can be tested with buffers.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	root := newRoot(&streams{in: stdin, out: stdout, err: stderr})
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root.ExecuteContext(ctx)
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
