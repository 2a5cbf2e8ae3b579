// Package cli is the small kit both of the product's commands are built
// with: the store's agent (cmd/agent) and head office's hq (cmd/hq). It
// holds the exit codes and the error that carries one (Error), usage errors for a
// wrong flag or argument, command groups that refuse an unknown
// subcommand, JSON output, and the streams a command reads and writes, so
// that a whole command line runs against buffers in a test; and what both
// print the same way: the times an operator gives (ParseTime), ages, and
// the quarantine lists a store answers locally and over NATS (the types of
// central/command, so head office's binary links no store package for
// them).
//
// Its promise is the exit-code contract of both binaries (DESIGN §7): 0
// done, 1 error, 2 usage (nothing was done), 3 done and something needs
// attention; a message is printed once, on the error stream, prefixed with
// the program's name.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rxedge/agent/internal/suggest"
)

// Exit codes (DESIGN §7).
const (
	ExitOK        = 0
	ExitError     = 1
	ExitUsage     = 2
	ExitAttention = 3 // done, and something needs attention
)

// Streams are what a command reads and writes: standard input, output and
// error in a process, buffers in a test.
type Streams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// Error ends a command with an exit code; its message, if any, is
// printed.
type Error struct {
	Code int
	Msg  string
	// Plugin marks an exit code of the monitoring-plugin contract (`agent
	// status --check`), where 2 means CRITICAL, not a usage error: it is
	// passed on as it is.
	Plugin bool
}

func (e *Error) Error() string { return e.Msg }

// UsageError is a usage error (exit 2) with a formatted message.
func UsageError(format string, args ...any) error {
	return &Error{Code: ExitUsage, Msg: fmt.Sprintf(format, args...)}
}

// UsageArgs turns an argument check's failure into a usage error (exit 2).
func UsageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return UsageError("%v (see `%s --help`)", err, cmd.CommandPath())
		}
		return nil
	}
}

// NoArgs refuses arguments with a usage error.
var NoArgs = UsageArgs(cobra.NoArgs)

// Group makes a command that only holds subcommands refuse an unknown one
// with a usage error (exit 2) instead of printing help and succeeding.
func Group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = NoArgs
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	return cmd
}

// Root makes cmd the root of a program: errors are returned, not printed
// by cobra with the usage text, and a flag that does not parse is a usage
// error. It returns cmd as a Group.
func Root(cmd *cobra.Command) *cobra.Command {
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if s := flagSuggestion(c, err); s != "" {
			return UsageError("%v (did you mean --%s?) (see `%s --help`)", err, s, c.CommandPath())
		}
		return UsageError("%v (see `%s --help`)", err, c.CommandPath())
	})
	return Group(cmd)
}

// flagSuggestion is the flag of c nearest to the unknown long flag err
// names, as the settings loader suggests a key (suggest.Closest), or "".
// Hidden and deprecated flags are not offered.
func flagSuggestion(c *cobra.Command, err error) string {
	var ne *pflag.NotExistError
	if !errors.As(err, &ne) || ne.GetSpecifiedShortnames() != "" || ne.GetSpecifiedName() == "" {
		return ""
	}
	var known []string
	add := func(f *pflag.Flag) {
		if !f.Hidden && f.Deprecated == "" {
			known = append(known, f.Name)
		}
	}
	c.Flags().VisitAll(add)
	c.InheritedFlags().VisitAll(add)
	return suggest.Closest(ne.GetSpecifiedName(), known)
}

// Execute runs the command line args against root with the streams s and
// returns the command's error; ExitCode turns it into the exit code.
func Execute(ctx context.Context, root *cobra.Command, args []string, s *Streams) error {
	root.SetArgs(args)
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	return root.ExecuteContext(ctx)
}

// ExitCode is the exit code of a command's error. It prints the error's
// message on stderr, prefixed with the program's name, unless it is an
// Error without one.
func ExitCode(program string, err error, stderr io.Writer) int {
	if err == nil {
		return ExitOK
	}
	var e *Error
	if errors.As(err, &e) {
		if e.Msg != "" {
			fmt.Fprintln(stderr, program+":", e.Msg)
		}
		return e.Code
	}
	fmt.Fprintln(stderr, program+":", err)
	return ExitError
}

// PrintJSON writes v as indented JSON, the form of every --json output.
func PrintJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
