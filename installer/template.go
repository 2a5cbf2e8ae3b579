package installer

import (
	"fmt"
	"strings"
)

// Template is a YAML config edited key by key, line by line: the keys it
// sets get new lines, and every other line, comment and blank keeps its
// text and place. It reads block mappings written one key a line (as the
// example config is); a key inside a sequence, a flow collection or a
// block scalar is not addressed. Callers check the result by parsing it.
type Template struct {
	lines []string // without line ends
	eol   string   // "\r\n" when the text used it, else "\n"
}

// ParseTemplate splits b into lines, remembering whether it ends lines with
// CRLF, so Bytes writes them back the same way.
func ParseTemplate(b []byte) *Template {
	s, eol := string(b), "\n"
	if strings.Contains(s, "\r\n") {
		eol = "\r\n"
	}
	s = strings.TrimSuffix(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	t := &Template{eol: eol}
	if s != "" {
		t.lines = strings.Split(s, "\n")
	}
	return t
}

// Bytes is the edited text, every line ended as the parsed text ended
// them.
func (t *Template) Bytes() []byte {
	if len(t.lines) == 0 {
		return nil
	}
	return []byte(strings.Join(t.lines, t.eol) + t.eol)
}

// YAMLQuote returns s as a YAML single-quoted scalar, in which backslashes,
// colons and '#' are literal and a quote is doubled.
func YAMLQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// Set sets the scalar at path (dotted: "ingest.token_file") to value,
// quoted; a value with a line break is refused. An existing key's line is
// replaced (a comment after its value goes with it); lines under it stay,
// so a key that held a block is left for the caller's parse to refuse. A
// missing key is added as the first key under its parent, indented as the
// parent's other keys; a missing top-level key, or parent, at the end.
func (t *Template) Set(path, value string) error {
	return t.set(path, []string{YAMLQuote(value)}, false, false)
}

// SetFirst is Set, but a missing top-level key is added as the first line.
func (t *Template) SetFirst(key, value string) error {
	return t.set(key, []string{YAMLQuote(value)}, true, false)
}

// SetList sets the key at path to a block sequence of values, each quoted,
// or to [] when there are none, replacing the items the key had.
func (t *Template) SetList(path string, values []string) error {
	if len(values) == 0 {
		return t.set(path, []string{"[]"}, false, true)
	}
	v := []string{""}
	for _, s := range values {
		v = append(v, "- "+YAMLQuote(s))
	}
	return t.set(path, v, false, true)
}

// set writes path: value[0], and value[1:] as lines under it, indented two
// more than the key; a list replaces the lines that were under the key.
func (t *Template) set(path string, value []string, first, list bool) error {
	for _, v := range value {
		if strings.ContainsAny(v, "\r\n") {
			return fmt.Errorf("%s: the value has a line break, which a one-line YAML scalar cannot carry", path)
		}
	}
	i, err := t.find(path, first)
	if err != nil {
		return err
	}
	l := t.lines[i]
	indent := l[:len(l)-len(trimIndent(l))]
	if list {
		t.dropChildren(i)
	}
	key := path[strings.LastIndexByte(path, '.')+1:]
	out := []string{indent + key + ":"}
	if value[0] != "" {
		out[0] += " " + value[0]
	}
	for _, v := range value[1:] {
		out = append(out, indent+"  "+v)
	}
	t.lines = append(t.lines[:i], append(out, t.lines[i+1:]...)...)
	return nil
}

// find returns the line of the key at path, adding the key (and its
// parents) where it is missing.
func (t *Template) find(path string, first bool) (int, error) {
	if i := t.index(path); i >= 0 {
		return i, nil
	}
	parent, key := "", path
	if dot := strings.LastIndexByte(path, '.'); dot >= 0 {
		parent, key = path[:dot], path[dot+1:]
	}
	if parent == "" {
		if first {
			t.lines = append([]string{key + ":"}, t.lines...)
			return 0, nil
		}
		t.lines = append(t.lines, key+":")
		return len(t.lines) - 1, nil
	}
	p, err := t.find(parent, false)
	if err != nil {
		return 0, err
	}
	pl := t.lines[p]
	if _, v, _ := strings.Cut(pl, ":"); !isEmptyValue(v) {
		return 0, fmt.Errorf("%s is written inline; write it as a block with `%s:` on its own line", parent, key)
	}
	indent := pl[:len(pl)-len(trimIndent(pl))] + "  "
	if c := t.firstChild(p); c >= 0 {
		cl := t.lines[c]
		indent = cl[:len(cl)-len(trimIndent(cl))]
	}
	t.lines = append(t.lines[:p+1], append([]string{indent + key + ":"}, t.lines[p+1:]...)...)
	return p + 1, nil
}

// index returns the line of the key at path, or -1.
func (t *Template) index(path string) int {
	type open struct {
		indent int
		key    string
	}
	var stack []open
	for i := 0; i < len(t.lines); i++ {
		key, indent, ok := keyOf(t.lines[i])
		if !ok {
			continue
		}
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, open{indent, key})
		keys := make([]string, len(stack))
		for j, o := range stack {
			keys[j] = o.key
		}
		if strings.Join(keys, ".") == path {
			return i
		}
		if _, v, _ := strings.Cut(t.lines[i], ":"); isBlockScalar(v) {
			i = t.blockEnd(i) - 1
		}
	}
	return -1
}

// blockEnd returns the first line after i that is not part of the value of
// the key on line i: a key or item indented no deeper than it (an item at
// the same indent still belongs to it).
func (t *Template) blockEnd(i int) int {
	indent := len(t.lines[i]) - len(trimIndent(t.lines[i]))
	for j := i + 1; j < len(t.lines); j++ {
		l := t.lines[j]
		rest := trimIndent(l)
		if rest == "" || rest[0] == '#' {
			continue
		}
		n := len(l) - len(rest)
		if n < indent || n == indent && !isItem(rest) {
			return j
		}
	}
	return len(t.lines)
}

// firstChild returns the first key line under the key on line i, or -1.
func (t *Template) firstChild(i int) int {
	for j := i + 1; j < t.blockEnd(i); j++ {
		if _, _, ok := keyOf(t.lines[j]); ok {
			return j
		}
	}
	return -1
}

// dropChildren removes the lines of the value under the key on line i,
// keeping comments and blank lines.
func (t *Template) dropChildren(i int) {
	end := t.blockEnd(i)
	kept := t.lines[:i+1]
	for _, l := range t.lines[i+1 : end] {
		if rest := trimIndent(l); rest == "" || rest[0] == '#' {
			kept = append(kept, l)
		}
	}
	t.lines = append(kept, t.lines[end:]...)
}

// keyOf returns the key and indent of a `key: value` line; ok is false for
// blank lines, comments and sequence items.
func keyOf(l string) (key string, indent int, ok bool) {
	rest := trimIndent(l)
	if rest == "" || rest[0] == '#' || isItem(rest) {
		return "", 0, false
	}
	key, _, found := strings.Cut(rest, ":")
	if !found {
		return "", 0, false
	}
	return strings.TrimSpace(key), len(l) - len(rest), true
}

func trimIndent(l string) string { return strings.TrimLeft(l, " \t") }

func isItem(rest string) bool { return rest == "-" || strings.HasPrefix(rest, "- ") }

// isEmptyValue reports whether what follows a key's colon is nothing or a
// comment, so the value is the block below it.
func isEmptyValue(v string) bool {
	v = strings.TrimSpace(v)
	return v == "" || v[0] == '#'
}

func isBlockScalar(v string) bool {
	v = strings.TrimSpace(v)
	return v != "" && (v[0] == '|' || v[0] == '>')
}
