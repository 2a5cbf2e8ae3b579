package notary_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/notary"
)

// badKeyFile puts something that is not the store's key file at path
// and returns what LoadKey's error must say.
type badKeyFile struct {
	name string
	make func(t *testing.T, path string)
	want string
}

// badKeyFiles are what an attacker (or an accident) could leave where the
// key file belongs. Each is refused with a clear error; none is read
// through, waited on, replaced or removed.
func badKeyFiles(t *testing.T) []badKeyFile {
	elsewhere := t.TempDir()
	mine := filepath.Join(elsewhere, "mine.key")
	if _, err := notary.CreateKey(mine, store); err != nil {
		t.Fatal(err)
	}
	symlink := func(target string) func(*testing.T, string) {
		return func(t *testing.T, path string) {
			if err := os.Symlink(target, path); err != nil {
				t.Skipf("this system makes no symbolic links for this user: %v", err)
			}
			if _, err := os.Lstat(path); err != nil {
				t.Skipf("the symbolic link made is not there (Wine makes none): %v", err)
			}
		}
	}
	file := func(b []byte) func(*testing.T, string) {
		return func(t *testing.T, path string) {
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	garbage := make([]byte, 300)
	rand.Read(garbage)
	garbage = bytes.ReplaceAll(garbage, []byte("\n"), []byte("x")) // one line
	return []badKeyFile{
		// A valid key of this very store, but through a link: the key is
		// read only from the file at the configured path.
		{"symlink to a key", symlink(mine), "symbolic link"},
		{"symlink to another file", symlink(other(t, elsewhere)), "symbolic link"},
		// A dangling link is not a missing key: making a key there would
		// write through it or replace it.
		{"dangling symlink", symlink(filepath.Join(elsewhere, "nothing", "here")), "symbolic link"},
		{"directory", func(t *testing.T, path string) { os.Mkdir(path, 0o700) }, "is a directory"},
		{"huge", func(t *testing.T, path string) {
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(64 << 20); err != nil {
				t.Fatal(err)
			}
		}, "not a key file"},
		{"garbage", file(garbage), "not a key file"},
		{"garbage lines", file([]byte("PRIVATE+KEY+nope\nnope\n")), "no valid private key"},
	}
}

// snapshot is what is at a path, to show it was left as it was.
func snapshot(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	s := fi.Mode().String()
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(path)
		s += " -> " + target
	case fi.Mode().IsRegular() && fi.Size() < 1<<20:
		b, _ := os.ReadFile(path)
		s += " " + string(b)
	default:
		s += " " + fi.ModTime().String()
	}
	return s
}

// TestBadKeyFileIsRefusedNeverReplaced: LoadKey refuses each bad key
// file with an error naming what it is (never the file's content); the
// notary signs nothing, shows the error and makes no key over it; a
// rotation refuses it too; and the thing itself, and what a link points
// to, are left as they were.
func TestBadKeyFileIsRefusedNeverReplaced(t *testing.T) {
	for _, bad := range badKeyFiles(t) {
		t.Run(bad.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, notary.KeyFileName)
			bad.make(t, path)
			before := snapshot(t, path)
			target, _ := os.Readlink(path)
			var targetBefore []byte
			if target != "" {
				targetBefore, _ = os.ReadFile(target)
			}

			_, err := notary.LoadKey(path, store)
			if err == nil || errors.Is(err, notary.ErrNoKey) || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("LoadKey: %v, want an error naming %s and %q", err, path, bad.want)
			}
			if strings.Contains(err.Error(), "PRIVATE") {
				t.Fatalf("the error shows the file's content: %v", err)
			}

			q := openQueue(t)
			enqueue(t, q, "a", 2)
			n := newNotary(t, q, path)
			n.PrepareKey()
			if err := n.Tick(t.Context()); err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Fatalf("Tick: %v, want the refusal", err)
			}
			if st := n.State(); st.PublicKey != "" || !st.KeyLost.IsZero() || !strings.Contains(st.Error, bad.want) {
				t.Fatalf("state %+v", st)
			}
			if ls, _ := q.Ledger(); ls.Signed != 0 || ls.Latest != nil {
				t.Fatalf("a checkpoint was signed: %+v", ls)
			}
			if _, err := notary.RotateKey(path, store, true, time.Now()); err == nil {
				t.Fatal("RotateKey replaced it")
			}
			if after := snapshot(t, path); after != before {
				t.Fatalf("the key file's place changed:\nbefore %s\nafter  %s", before, after)
			}
			if target != "" {
				if after, _ := os.ReadFile(target); !bytes.Equal(after, targetBefore) {
					t.Fatal("the link's target changed")
				}
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 1 {
				t.Fatalf("files left beside it: %v", left)
			}
		})
	}
}

// TestRotateKeyLeavesAForeignNewFile: a file where a rotation writes its
// new key, which no rotation left, stops the rotation and is kept; a
// whole key an interrupted rotation left is replaced.
func TestRotateKeyLeavesAForeignNewFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, notary.KeyFileName)
	first, err := notary.CreateKey(path, store)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".new", []byte("not mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := notary.RotateKey(path, store, false, time.Now()); err == nil || !strings.Contains(err.Error(), "in the way") {
		t.Fatalf("RotateKey over a foreign .new: %v", err)
	}
	if b, _ := os.ReadFile(path + ".new"); string(b) != "not mine" {
		t.Fatal("the foreign file was replaced")
	}
	if k, err := notary.LoadKey(path, store); err != nil || k.VKey != first.VKey {
		t.Fatalf("the key changed: %v", err)
	}
	os.Remove(path + ".new")
	if _, err := notary.CreateKey(path+".new", store); err != nil {
		t.Fatal(err)
	}
	r, err := notary.RotateKey(path, store, false, time.Now())
	if err != nil || r.Old != first.VKey {
		t.Fatalf("RotateKey after an interrupted one: %+v %v", r, err)
	}
}

// other is a file that is not a key, outside the data directory.
func other(t *testing.T, dir string) string {
	p := filepath.Join(dir, "settings.conf")
	if err := os.WriteFile(p, []byte("a file the agent must not touch\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
