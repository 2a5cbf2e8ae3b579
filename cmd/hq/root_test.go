package main

import (
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/testkit/agentbin"
)

// TestUsageErrors: an unknown command or flag is a usage error (exit 2),
// as in the store's binary.
func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"bogus"}, {"version", "x"}, {"version", "--bogus"}} {
		if _, stderr, code := runCLI(t, args...); code != cli.ExitUsage || !strings.HasPrefix(stderr, "hq: ") {
			t.Errorf("hq %v: exit %d, stderr %q; want exit 2 with the hq: prefix", args, code, stderr)
		}
	}
}

// TestUnknownFlagSuggests: a mistyped flag is refused with the flag it is
// closest to, as a mistyped setting is.
func TestUnknownFlagSuggests(t *testing.T) {
	_, stderr, code := runCLI(t, "sink", "--postgres-pasword-file", "pw")
	if code != cli.ExitUsage || !strings.Contains(stderr, "unknown flag: --postgres-pasword-file (did you mean --postgres-password-file?)") {
		t.Errorf("exit %d, stderr %q; want exit 2 offering --postgres-password-file", code, stderr)
	}
}

// TestBinary: the built binary runs and says what it is.
func TestBinary(t *testing.T) {
	out, err := exec.Command(agentbin.BuildHQ(t), "version", "--json").Output()
	if err != nil || !strings.Contains(string(out), `"go_version"`) {
		t.Fatalf("hq version --json: %v\n%s", err, out)
	}
}

// TestFlagUsagesRenderAsWritten: no flag's usage holds a backquote, which
// pflag's help takes for the name of the flag's value (doctor's --dev
// rendered as "--dev run --dev").
func TestFlagUsagesRenderAsWritten(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				t.Errorf("%s --%s: the usage %q holds a backquote", c.CommandPath(), f.Name, f.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot(&cli.Streams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}))
}
