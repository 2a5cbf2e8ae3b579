// Command hq is RxEdge's head-office binary (packaged as rxedge-hq): what
// head office runs against central and the stores, apart from the
// store's agent (cmd/agent), which links none of it. See `hq help` and
// the README.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rxedge/agent/internal/cli"
)

func main() {
	ctx, stop := interruptContext(context.Background())
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// interruptContext is cancelled by the first SIGINT or SIGTERM, which the
// long-running commands (sink, witness, hub) take as their stop. That
// also releases the signals, so a second one ends the process at once.
func interruptContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	return ctx, stop
}

// run executes the command line args and returns its error; main turns it
// into the exit code, so the whole CLI can be tested with buffers.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	s := &cli.Streams{In: stdin, Out: stdout, Err: stderr}
	return cli.Execute(ctx, newRoot(s), args, s)
}

// exitCode is the exit code of run's error, which it prints (cli.ExitCode).
func exitCode(err error, stderr io.Writer) int { return cli.ExitCode("hq", err, stderr) }
