package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		code    int
		printed string
	}{
		{"nil", nil, ExitOK, ""},
		{"plain error", errors.New("cannot read x"), ExitError, "prog: cannot read x\n"},
		{"usage", UsageError("--n must be %d", 3), ExitUsage, "prog: --n must be 3\n"},
		{"attention, nothing to say", &Error{Code: ExitAttention}, ExitAttention, ""},
		{"wrapped", fmt.Errorf("outer: %w", &Error{Code: ExitAttention, Msg: "inner"}), ExitAttention, "prog: inner\n"},
		{"plugin", &Error{Code: 2, Plugin: true}, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if got := ExitCode("prog", tc.err, &b); got != tc.code || b.String() != tc.printed {
				t.Errorf("exit %d printing %q, want %d printing %q", got, b.String(), tc.code, tc.printed)
			}
		})
	}
}

// testRoot is a program with one group holding one command without
// arguments, which prints "done" and its --n.
func testRoot(s *Streams) *cobra.Command {
	root := &cobra.Command{Use: "prog"}
	grp := &cobra.Command{Use: "grp"}
	var n int
	sub := &cobra.Command{Use: "sub", Args: NoArgs, RunE: func(cmd *cobra.Command, _ []string) error {
		_, err := fmt.Fprintf(s.Out, "done %d\n", n)
		return err
	}}
	sub.Flags().IntVar(&n, "n", 0, "a number")
	sub.Flags().Int("count", 0, "a count")
	sub.Flags().Int("moved-away", 0, "a hidden flag")
	_ = sub.Flags().MarkHidden("moved-away")
	grp.AddCommand(sub)
	root.AddCommand(Group(grp))
	return Root(root)
}

// TestExecuteUsage: an unknown command, flag or argument is a usage error
// (exit 2) that names the command's help, and an unknown flag near a
// known one (not a hidden one) is offered it; a known one runs on the
// streams.
func TestExecuteUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string
		msg  string
	}{
		{[]string{"grp", "sub", "--n", "4"}, ExitOK, "done 4\n", ""},
		{[]string{"grp", "nope"}, ExitUsage, "", "see `prog grp --help`"},
		{[]string{"nope"}, ExitUsage, "", "see `prog --help`"},
		{[]string{"grp", "sub", "--m"}, ExitUsage, "", "unknown flag: --m (see `prog grp sub --help`)"},
		{[]string{"grp", "sub", "--n", "x"}, ExitUsage, "", "see `prog grp sub --help`"},
		{[]string{"grp", "sub", "--cuont", "1"}, ExitUsage, "", "unknown flag: --cuont (did you mean --count?) (see `prog grp sub --help`)"},
		{[]string{"grp", "sub", "--moved-awya=1"}, ExitUsage, "", "unknown flag: --moved-awya (see `prog grp sub --help`)"},
		{[]string{"grp", "sub", "-c"}, ExitUsage, "", "unknown shorthand flag: 'c' in -c (see `prog grp sub --help`)"},
		{[]string{"grp", "sub", "extra"}, ExitUsage, "", "see `prog grp sub --help`"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			s := &Streams{In: strings.NewReader(""), Out: &out, Err: &errb}
			code := ExitCode("prog", Execute(context.Background(), testRoot(s), tc.args, s), &errb)
			if code != tc.code || out.String() != tc.out || !strings.Contains(errb.String(), tc.msg) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q, stderr holding %q", code, out.String(), errb.String(), tc.code, tc.out, tc.msg)
			}
		})
	}
}

func TestPrintJSON(t *testing.T) {
	var b bytes.Buffer
	if err := PrintJSON(&b, map[string]any{"a": []int{1}}); err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"a\": [\n    1\n  ]\n}\n"; b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
