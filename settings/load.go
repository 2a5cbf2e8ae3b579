package settings

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rxedge/agent/internal/disk"
	"github.com/rxedge/agent/internal/redact"
	"github.com/rxedge/agent/internal/suggest"
)

// MaxFileBytes bounds a configuration file (the example, every key
// commented, is about 12 KiB).
const MaxFileBytes = 1 << 20

// LoadFile reads a YAML configuration file strictly (a regular file of at
// most MaxFileBytes: a FIFO in its place is refused, not waited on). It reports every
// unknown key with its line and the known key it is closest to, and every
// value of the wrong type with its field and line, all at once (a YAML
// syntax error stops the parser, so it comes alone).
func LoadFile(path string) (Config, error) {
	var c Config
	data, err := disk.ReadRegular(path, MaxFileBytes)
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return c, nil
		}
		return c, &FileError{Path: path, Problems: []string{strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	var problems []string
	if len(doc.Content) > 0 {
		decodeNode(doc.Content[0], reflect.ValueOf(&c).Elem(), "", &problems)
	}
	if len(problems) > 0 {
		return c, &FileError{Path: path, Problems: problems}
	}
	return c, nil
}

// FileError lists every problem of a configuration file, each with its line.
type FileError struct {
	Path     string
	Problems []string
}

func (e *FileError) Error() string {
	return "config " + e.Path + ":\n  " + strings.Join(e.Problems, "\n  ")
}

var durationType = reflect.TypeOf(time.Duration(0))

// decodeNode decodes n into v (a struct field at path), collecting
// problems instead of stopping at the first.
func decodeNode(n *yaml.Node, v reflect.Value, path string, problems *[]string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if v.Kind() != reflect.Struct {
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			return
		}
		if err := n.Decode(v.Addr().Interface()); err != nil {
			*problems = append(*problems, fmt.Sprintf("line %d: %s: want %s, got %s", n.Line, path, want(v.Type()), got(n, path)))
		}
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	if n.Kind != yaml.MappingNode {
		where := path
		if where == "" {
			where = "the file"
		}
		*problems = append(*problems, fmt.Sprintf("line %d: %s: want a mapping of settings, got %s", n.Line, where, got(n, path)))
		return
	}
	fields, known := yamlFields(v.Type())
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		name := k.Value
		full := name
		if path != "" {
			full = path + "." + name
		}
		idx, ok := fields[name]
		if !ok {
			msg := fmt.Sprintf("line %d: unknown key %s", k.Line, quoted(name))
			if path != "" {
				msg += " in " + path
			}
			if s := suggest.Closest(name, known); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			*problems = append(*problems, msg)
			continue
		}
		if line, dup := seen[name]; dup {
			*problems = append(*problems, fmt.Sprintf("line %d: %s: set twice (first on line %d)", k.Line, full, line))
			continue
		}
		seen[name] = k.Line
		decodeNode(val, v.Field(idx), full, problems)
	}
}

// yamlFields maps the YAML keys of struct type t to its fields' indexes,
// and lists the keys in order.
func yamlFields(t reflect.Type) (map[string]int, []string) {
	fields := map[string]int{}
	var known []string
	for i := 0; i < t.NumField(); i++ {
		tag := strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0]
		if tag != "" && tag != "-" {
			fields[tag] = i
			known = append(known, tag)
		}
	}
	return fields, known
}

// want names the type a setting takes.
func want(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration such as 30s or 5m"
	case t.Kind() == reflect.String:
		return "text"
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64:
		return "a whole number"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() == reflect.Slice:
		return "a list of " + strings.TrimPrefix(want(t.Elem()), "a ")
	case t.Kind() == reflect.Map:
		return "a mapping of names to " + want(t.Elem())
	}
	return t.String()
}

// got describes what the file holds, without echoing a secret: the value
// of a field that holds a credential is never shown, and a value that looks
// like a URL is shown only as redact.Shown allows.
func got(n *yaml.Node, path string) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	if secret(path) {
		return "a value (not shown: it may be a secret)"
	}
	return quoted(n.Value)
}

// quoted is v as a problem may quote it: cut to 40 characters, or a phrase
// in its place when it may hold a password.
func quoted(v string) string {
	v, ok := redact.Shown(v)
	if !ok {
		return "a value (not shown: it may hold a password)"
	}
	if len(v) > 40 {
		v = v[:40] + "…"
	}
	return fmt.Sprintf("%q", v)
}

// secret reports whether the setting at path holds a credential.
func secret(path string) bool {
	leaf := path[strings.LastIndex(path, ".")+1:]
	return leaf == "password" || leaf == "token"
}
