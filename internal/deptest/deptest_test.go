package deptest

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const (
	module     = "github.com/rxedge/agent"
	natsServer = "github.com/nats-io/nats-server"
)

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

// TestEveryPackageHasADocComment: each package says what it promises.
func TestEveryPackageHasADocComment(t *testing.T) {
	for _, p := range list(t) {
		if p.Doc == "" {
			t.Errorf("package %s has no doc comment", p.ImportPath)
		}
	}
}
