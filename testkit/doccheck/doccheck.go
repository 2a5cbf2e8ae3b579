// Package doccheck holds the documentation to the commands it shows. It
// reads the fenced code blocks of Markdown files, takes every line that
// runs one of the product's binaries, and walks its words through the
// binary's command tree: a command that does not exist, one that moved
// (hidden), or a flag the command does not take is an error naming the
// file and line. A renamed command or flag then fails a test instead of a
// reader.
//
// What it does not check: values (a flag's argument is skipped, not
// parsed), positional arguments, and commands shown in running text rather
// than in a code block.
package doccheck

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Binary names the spellings under which the documentation runs one
// binary: its names (on the PATH, as a path, with .exe) and the package
// `go run` builds it from.
type Binary struct {
	Names   []string // e.g. "agent", "rxedge-agent"
	Package string   // e.g. "./cmd/agent"
}

// Agent and HQ are the product's two binaries.
var (
	Agent = Binary{Names: []string{"agent", "rxedge-agent"}, Package: "./cmd/agent"}
	HQ    = Binary{Names: []string{"hq", "rxedge-hq"}, Package: "./cmd/hq"}
)

// Invocation is one documented command line of a binary.
type Invocation struct {
	File string
	Line int
	Args []string // the words after the binary's name
}

func (v Invocation) String() string {
	return fmt.Sprintf("%s:%d: %s", v.File, v.Line, strings.Join(v.Args, " "))
}

// Extract returns the invocations of b in the fenced code blocks of the
// Markdown file at path.
func Extract(path string, b Binary) ([]Invocation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out     []Invocation
		inFence bool
		fence   string
		pending string
		start   int
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if mark, ok := fenceMark(trimmed); ok {
			switch {
			case !inFence:
				inFence, fence = true, mark
			case mark[0] == fence[0] && len(mark) >= len(fence) && trimmed == mark:
				inFence, pending = false, ""
			}
			continue
		}
		if !inFence {
			continue
		}
		if pending == "" {
			start = n
		}
		// A line continued with a backslash (sh), a backquote
		// (PowerShell) or a caret (cmd) is one command with the next.
		if c, ok := continued(trimmed); ok {
			pending += c + " "
			continue
		}
		text := pending + trimmed
		pending = ""
		if args, ok := invocation(text, b); ok {
			out = append(out, Invocation{File: filepath.ToSlash(path), Line: start, Args: args})
		}
	}
	return out, sc.Err()
}

// fenceMark returns the fence a line opens or closes: three or more
// backquotes or tildes.
func fenceMark(s string) (string, bool) {
	for _, c := range []string{"```", "~~~"} {
		if strings.HasPrefix(s, c) {
			return s[:len(s)-len(strings.TrimLeft(s, c[:1]))], true
		}
	}
	return "", false
}

func continued(s string) (string, bool) {
	for _, c := range []string{`\`, "`", "^"} {
		if strings.HasSuffix(s, " "+c) || s == c {
			return strings.TrimSuffix(s, c), true
		}
	}
	return "", false
}

// invocation returns the words after b's name when the line runs b: after
// an optional prompt, sudo, environment assignments, or `go run [flags]
// PACKAGE`. The command ends at a pipe, a redirection, a separator or a
// comment.
func invocation(text string, b Binary) ([]string, bool) {
	// A synopsis puts its description after a wide gap: the command is
	// what comes before it.
	if k := strings.Index(text, "   "); k > 0 {
		text = text[:k]
	}
	words := split(text)
	i := 0
	for i < len(words) && (words[i] == "$" || words[i] == "PS>" || words[i] == ">" || words[i] == "sudo" || words[i] == "&" ||
		isAssignment(words[i]) || strings.HasSuffix(words[i], ">") && strings.Contains(words[i], `:\`)) {
		i++
	}
	if i >= len(words) {
		return nil, false
	}
	switch {
	case words[i] == "go" && i+1 < len(words) && words[i+1] == "run":
		j := i + 2
		for j < len(words) && strings.HasPrefix(words[j], "-") {
			j++
		}
		if j >= len(words) || strings.TrimSuffix(words[j], "/") != b.Package {
			return nil, false
		}
		i = j
	case !b.named(words[i]):
		return nil, false
	}
	var args []string
	for _, w := range words[i+1:] {
		if ends(w) {
			break
		}
		args = append(args, w)
	}
	return args, true
}

// named reports whether w runs b: one of its names, alone, as a path, or
// with .exe.
func (b Binary) named(w string) bool {
	w = strings.TrimSuffix(strings.ToLower(w), ".exe")
	if k := strings.LastIndexAny(w, `/\`); k >= 0 {
		w = w[k+1:]
	}
	for _, n := range b.Names {
		if w == n {
			return true
		}
	}
	return false
}

func isAssignment(w string) bool {
	k := strings.IndexByte(w, '=')
	if k <= 0 || strings.HasPrefix(w, "-") {
		return false
	}
	for _, r := range w[:k] {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func ends(w string) bool {
	switch w {
	case "|", "||", "&&", ";", "&", "<", ">", ">>", "2>&1", "2>", "1>":
		return true
	}
	return strings.HasPrefix(w, "#") || strings.HasPrefix(w, ">") || strings.HasPrefix(w, "2>") || strings.HasPrefix(w, "$(")
}

// split splits a line into words as a shell would for quoting: single and
// double quotes group, a backslash is kept (Windows paths).
func split(s string) []string {
	var (
		words []string
		cur   strings.Builder
		quote rune
		in    bool
	)
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}

// Check walks v's words through root's command tree: the words that are
// not flags name subcommands until the first that is an argument; every
// flag must be one the command takes (its own or inherited). A
// placeholder's brackets (`[--json|--csv]`) are read as the flags they
// offer; a flag's value is skipped.
func Check(root *cobra.Command, v Invocation) error {
	cmd, descending := root, true
	words := expand(v.Args)
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case w == "--":
			return nil
		case w == "-h" || w == "--help":
		case strings.HasPrefix(w, "-") && len(w) > 1:
			f, err := lookup(cmd, w)
			if err != nil {
				return fmt.Errorf("%s: %w", v, err)
			}
			if f.NoOptDefVal == "" && !strings.Contains(w, "=") {
				i++ // its value
			}
		case descending:
			// A synopsis offers alternatives: `dlq list|show`; each must
			// be a command, and the walk goes on with the first.
			alts := strings.Split(w, "|")
			for _, a := range alts[1:] {
				if cmd.HasAvailableSubCommands() && child(cmd, a) == nil {
					return fmt.Errorf("%s: %s has no command %q", v, cmd.CommandPath(), a)
				}
			}
			w = alts[0]
			sub := child(cmd, w)
			switch {
			case sub != nil && sub.Hidden:
				return fmt.Errorf("%s: %q is not a command of %s any more (hidden: %s)", v, w, cmd.CommandPath(), sub.Short)
			case sub != nil:
				cmd = sub
			case cmd.HasAvailableSubCommands() && !cmd.Runnable():
				return fmt.Errorf("%s: %s has no command %q", v, cmd.CommandPath(), w)
			default:
				descending = false
			}
		}
	}
	if cmd.HasAvailableSubCommands() && !cmd.Runnable() && cmd != root {
		return fmt.Errorf("%s: %s needs a command", v, cmd.CommandPath())
	}
	return nil
}

// expand reads placeholder brackets: "[--store" "ID]" and "[--json|--csv]"
// become the flags and words they hold; an ellipsis is dropped.
func expand(args []string) []string {
	var out []string
	for _, a := range args {
		if strings.Contains(a, "…") || strings.Contains(a, "...") {
			continue // a placeholder: `--warn-…`, `URL,...`
		}
		if strings.ContainsAny(a, "[]()") {
			a = strings.Trim(a, "[]()")
			for _, p := range strings.Split(a, "|") {
				if p != "" && p != "…" && p != "..." {
					out = append(out, p)
				}
			}
			continue
		}
		out = append(out, a)
	}
	return out
}

func child(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name || c.HasAlias(name) {
			return c
		}
	}
	return nil
}

func lookup(cmd *cobra.Command, w string) (*pflag.Flag, error) {
	name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
	var f *pflag.Flag
	if strings.HasPrefix(w, "--") {
		f = cmd.Flags().Lookup(name)
		if f == nil {
			f = cmd.InheritedFlags().Lookup(name)
		}
	} else if len(name) == 1 {
		f = cmd.Flags().ShorthandLookup(name)
		if f == nil {
			f = cmd.InheritedFlags().ShorthandLookup(name)
		}
	}
	if f == nil {
		return nil, fmt.Errorf("%s takes no flag %s", cmd.CommandPath(), w)
	}
	return f, nil
}

// Files checks every invocation of b in the files against root and returns
// how many it checked and what it found wrong.
func Files(root *cobra.Command, b Binary, files ...string) (int, []error) {
	var (
		n    int
		errs []error
	)
	for _, file := range files {
		invs, err := Extract(file, b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, v := range invs {
			n++
			if err := Check(root, v); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return n, errs
}

// Docs checks the command lines of b in the README and docs/*.md under
// repo against root, failing t for each that does not hold, and for a
// count under min (the reader no longer recognising the lines would
// otherwise pass on nothing).
func Docs(t testing.TB, root *cobra.Command, b Binary, repo string, min int) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(repo, "README.md"))
	n, errs := Files(root, b, files...)
	for _, err := range errs {
		t.Error(err)
	}
	if n < min {
		t.Errorf("found %d command lines of %s in the docs, want at least %d", n, b.Names[0], min)
	}
	t.Logf("checked %d command lines of %s", n, b.Names[0])
}
