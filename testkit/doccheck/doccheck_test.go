package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// tree is a small binary: `tool report KIND [--store ID] [--json]`,
// `tool run --dev`, a group `tool remote` with `status`, and a hidden
// `central` that moved.
func tree(storeFlag string) *cobra.Command {
	root := &cobra.Command{Use: "hq"}
	root.PersistentFlags().String("server", "", "")
	report := &cobra.Command{Use: "report", RunE: func(*cobra.Command, []string) error { return nil }}
	report.Flags().String(storeFlag, "", "")
	report.Flags().Bool("json", false, "")
	report.Flags().Bool("csv", false, "")
	run := &cobra.Command{Use: "run", RunE: func(*cobra.Command, []string) error { return nil }}
	run.Flags().BoolP("dev", "d", false, "")
	remote := &cobra.Command{Use: "remote"}
	status := &cobra.Command{Use: "status", RunE: func(*cobra.Command, []string) error { return nil }}
	status.Flags().Bool("fleet", false, "")
	remote.AddCommand(status)
	central := &cobra.Command{Use: "central", Short: "moved", Hidden: true, RunE: func(*cobra.Command, []string) error { return nil }}
	root.AddCommand(report, run, remote, central)
	return root
}

const page = "# Page\n\nText with `hq report --nothing` outside a block is not read.\n\n" +
	"```sh\n" +
	"$ hq report balances [--store ID] [--json|--csv] --server nats://x:4222 | jq .\n" +
	"sudo RXEDGE_X=1 /usr/bin/rxedge-hq run --dev   # a comment --bogus\n" +
	"go run ./cmd/hq remote status \\\n    --fleet\n" +
	"echo hq is not run here\n" +
	"```\n"

func writePage(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "page.md")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDocumentedCommandsHold: every command line of the page is found
// (prompt, sudo, an environment assignment, a path, `go run`, a
// continuation) and holds against the tree.
func TestDocumentedCommandsHold(t *testing.T) {
	p := writePage(t, page)
	n, errs := Files(tree("store"), HQ, p)
	if n != 3 || len(errs) != 0 {
		t.Fatalf("checked %d invocations (want 3), errors %v", n, errs)
	}
}

// TestRenamedFlagFails: when the command's flag is renamed, the page that
// shows the old name fails, naming the file, the line and the flag.
func TestRenamedFlagFails(t *testing.T) {
	p := writePage(t, page)
	_, errs := Files(tree("store-id"), HQ, p)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "page.md:6:") || !strings.Contains(errs[0].Error(), "takes no flag --store") {
		t.Fatalf("errors %v, want one naming page.md:6 and --store", errs)
	}
}

// TestWrongCommandsFail: a command that does not exist under a group, one
// that moved, a group without its command and a flag of another command
// each fail.
func TestWrongCommandsFail(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{"hq remote bogus", `has no command "bogus"`},
		{"hq central verify", "not a command of hq any more"},
		{"hq remote", "needs a command"},
		{"hq run --fleet", "takes no flag --fleet"},
		{"rxedge-hq.exe run -x", "takes no flag -x"},
	} {
		p := writePage(t, "```\n"+c.line+"\n```\n")
		_, errs := Files(tree("store"), HQ, p)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), c.want) {
			t.Errorf("%s: errors %v, want %q", c.line, errs, c.want)
		}
	}
}
