// Command agent is the RxEdge edge agent: `agent run` runs it (in the
// foreground or as the system service); the other subcommands operate on a
// running or stopped agent. See `agent help` and the README.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/rxedge/agent/internal/cli"
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
	c, _, err := newRoot(&cli.Streams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}).Find(args)
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
	s := &cli.Streams{In: stdin, Out: stdout, Err: stderr}
	return checkUsage(args, stdout, cli.Execute(ctx, newRoot(s), args, s))
}

// exitCode is the exit code of run's error, which it prints (cli.ExitCode).
func exitCode(err error, stderr io.Writer) int { return cli.ExitCode("agent", err, stderr) }
