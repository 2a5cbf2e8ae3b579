package deptest

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/rxedge/agent"

type pkg struct {
	ImportPath string
	Name       string
	Doc        string
	Imports    []string
	Deps       []string
}

func list(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(out)
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	return pkgs
}

func ours(path string) bool { return path == module || strings.HasPrefix(path, module+"/") }

func std(path string) bool { return !strings.Contains(strings.Split(path, "/")[0], ".") }

// TestDependencyDirection: retry ← queue ← dlq/status/sync ← control ←
// daemon ← cmd (DESIGN §8).
func TestDependencyDirection(t *testing.T) {
	allowed := map[string]func(string) bool{
		// retry is the standard library only.
		"retry": std,
		// movement: the standard library only.
		"movement": std,
		// queue: bbolt, our movement model, the disk helpers and the
		// ledger contract (a leaf) with the tree and note code it uses.
		"queue": func(d string) bool {
			return std(d) || d == module+"/movement" || d == module+"/internal/disk" || d == module+"/central/ledger" || strings.HasPrefix(d, "golang.org/x/mod/sumdb") || strings.HasPrefix(d, "go.etcd.io/bbolt") || strings.HasPrefix(d, "golang.org/x/sys")
		},
	}
	for _, p := range list(t) {
		short := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		for _, d := range p.Imports {
			if strings.HasPrefix(d, module+"/cmd/") {
				t.Errorf("%s imports %s: nothing imports a command", p.ImportPath, d)
			}
		}
		if ok := allowed[short]; ok != nil {
			for _, d := range p.Deps {
				if !ok(d) {
					t.Errorf("%s depends on %s", short, d)
				}
			}
		}
	}
}

// TestEveryPackageHasADocComment: each package says what it promises.
func TestEveryPackageHasADocComment(t *testing.T) {
	for _, p := range list(t) {
		if p.Doc == "" {
			t.Errorf("package %s has no doc comment", p.ImportPath)
		}
	}
}

// TestSettingsBelowControl: settings only maps and collects each section's
// options; it never links the local API (package control), whose
// defaults it takes from the leaf control/ingest.
func TestSettingsBelowControl(t *testing.T) {
	for _, p := range list(t) {
		if p.ImportPath != module+"/settings" {
			continue
		}
		for _, d := range p.Deps {
			if d == module+"/control" {
				t.Errorf("settings depends on %s", d)
			}
		}
		return
	}
	t.Error("no package settings in the module")
}
