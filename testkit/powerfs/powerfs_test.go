package powerfs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// mount mounts f on a new directory, skipping the test where FUSE cannot
// be used, and unmounts it at the end of the test.
func mount(t *testing.T, f *FS) *Mount {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	m, err := f.Mount(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmount() })
	return m
}

// powerCycle cuts the power (if it is not already cut), unmounts and
// mounts again: the new mount shows what the cut kept.
func powerCycle(t *testing.T, f *FS, m *Mount) *Mount {
	t.Helper()
	f.Cut()
	dir := m.Dir()
	if err := m.Unmount(); err != nil {
		t.Fatal(err)
	}
	m, err := f.Mount(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Unmount() })
	return m
}

func writeFile(t *testing.T, path string, data []byte, sync bool) {
	t.Helper()
	fl, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fl.Write(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := fl.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := fl.Close(); err != nil {
		t.Fatal(err)
	}
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

// content returns the file's content, or "<missing>".
func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "<missing>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCut(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) // runs before the cut
		want  map[string]string              // file → content after the cut
	}{
		{"synced data and entry survive", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "a"), []byte("one"), true)
			syncDir(t, dir)
		}, map[string]string{"a": "one"}},
		{"data written after the fsync is gone", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "a")
			writeFile(t, p, []byte("one"), true)
			syncDir(t, dir)
			fl, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			fl.Write([]byte("two"))
			fl.Close()
			if got := content(t, p); got != "onetwo" {
				t.Fatalf("before the cut: got %q, want %q", got, "onetwo")
			}
		}, map[string]string{"a": "one"}},
		{"a new file without a directory fsync is gone", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "a"), []byte("one"), true)
		}, map[string]string{"a": "<missing>"}},
		{"a new entry without a file fsync is empty", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "a"), []byte("one"), false)
			syncDir(t, dir)
		}, map[string]string{"a": ""}},
		{"an unsynced truncation is undone", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "a")
			writeFile(t, p, []byte("one"), true)
			syncDir(t, dir)
			if err := os.Truncate(p, 1); err != nil {
				t.Fatal(err)
			}
		}, map[string]string{"a": "one"}},
		{"a rename without a directory fsync is undone", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "a"), []byte("old"), true)
			syncDir(t, dir)
			writeFile(t, filepath.Join(dir, "a.tmp"), []byte("new"), true)
			if err := os.Rename(filepath.Join(dir, "a.tmp"), filepath.Join(dir, "a")); err != nil {
				t.Fatal(err)
			}
		}, map[string]string{"a": "old", "a.tmp": "<missing>"}},
		{"a rename with a directory fsync stays", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "a"), []byte("old"), true)
			syncDir(t, dir)
			writeFile(t, filepath.Join(dir, "a.tmp"), []byte("new"), true)
			if err := os.Rename(filepath.Join(dir, "a.tmp"), filepath.Join(dir, "a")); err != nil {
				t.Fatal(err)
			}
			syncDir(t, dir)
		}, map[string]string{"a": "new", "a.tmp": "<missing>"}},
		{"a renamed file whose data was not synced is empty", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "a"), []byte("old"), true)
			syncDir(t, dir)
			writeFile(t, filepath.Join(dir, "a.tmp"), []byte("new"), false)
			if err := os.Rename(filepath.Join(dir, "a.tmp"), filepath.Join(dir, "a")); err != nil {
				t.Fatal(err)
			}
			syncDir(t, dir)
		}, map[string]string{"a": ""}},
		{"an unlink without a directory fsync is undone", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "a"), []byte("one"), true)
			syncDir(t, dir)
			if err := os.Remove(filepath.Join(dir, "a")); err != nil {
				t.Fatal(err)
			}
		}, map[string]string{"a": "one"}},
		{"a subdirectory needs its parent synced", func(t *testing.T, dir string) {
			sub := filepath.Join(dir, "d", "e")
			if err := os.MkdirAll(sub, 0o750); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(sub, "a"), []byte("one"), true)
			syncDir(t, sub)
			syncDir(t, filepath.Dir(sub))
		}, map[string]string{"d/e/a": "<missing>"}},
		{"a subdirectory with every parent synced stays", func(t *testing.T, dir string) {
			sub := filepath.Join(dir, "d", "e")
			if err := os.MkdirAll(sub, 0o750); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(sub, "a"), []byte("one"), true)
			syncDir(t, sub)
			syncDir(t, filepath.Dir(sub))
			syncDir(t, dir)
		}, map[string]string{"d/e/a": "one"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := New(Options{})
			m := mount(t, f)
			tt.setup(t, m.Dir())
			m = powerCycle(t, f, m)
			for name, want := range tt.want {
				if got := content(t, filepath.Join(m.Dir(), filepath.FromSlash(name))); got != want {
					t.Errorf("%s after the cut: got %q, want %q", name, got, want)
				}
			}
		})
	}
}

// TestRequestsFailAfterCut: nothing done after the cut can be mistaken
// for success.
func TestRequestsFailAfterCut(t *testing.T) {
	f := New(Options{})
	m := mount(t, f)
	p := filepath.Join(m.Dir(), "a")
	fl, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	f.Cut()
	select {
	case <-f.Off():
	default:
		t.Fatal("Off is not closed after Cut")
	}
	if _, err := fl.Write([]byte("x")); !errors.Is(err, syscall.EIO) {
		t.Errorf("write after the cut: got %v, want EIO", err)
	}
	if err := fl.Sync(); !errors.Is(err, syscall.EIO) {
		t.Errorf("fsync after the cut: got %v, want EIO", err)
	}
	if err := os.Mkdir(filepath.Join(m.Dir(), "d"), 0o750); err == nil {
		t.Error("mkdir after the cut succeeded")
	}
}

// TestCutAfter: the cut falls before the chosen request, which fails, and
// Trace records the requests carried out.
func TestCutAfter(t *testing.T) {
	f := New(Options{})
	m := mount(t, f)
	dir := m.Dir()
	f.Trace(true)
	writeFile(t, filepath.Join(dir, "a"), []byte("one"), true) // create, write, fsync
	f.CutAfter(2)
	syncDir(t, dir) // fsyncdir: carried out
	fl, err := os.OpenFile(filepath.Join(dir, "a"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fl.WriteAt([]byte("two"), 0); !errors.Is(err, syscall.EIO) {
		t.Errorf("the second request: got %v, want EIO", err)
	}
	fl.Close()
	var kinds []string
	for _, op := range f.Traced() {
		kinds = append(kinds, op.Kind+" "+op.Name)
	}
	if want := []string{"create a", "write a", "fsync a", "fsyncdir /"}; !slices.Equal(kinds, want) {
		t.Errorf("trace: got %q, want %q", kinds, want)
	}
	m = powerCycle(t, f, m)
	if got := content(t, filepath.Join(m.Dir(), "a")); got != "one" {
		t.Errorf("after the cut: got %q, want %q", got, "one")
	}
}

// TestTorn: with Torn, each unsynced page either reached the disk or did
// not, and the same seed makes the same choices.
func TestTorn(t *testing.T) {
	const pages = 64
	run := func(seed uint64) string {
		f := New(Options{Seed: seed, Torn: 0.5})
		m := mount(t, f)
		p := filepath.Join(m.Dir(), "a")
		writeFile(t, p, bytes.Repeat([]byte("o"), pages*pageSize), true)
		syncDir(t, m.Dir())
		fl, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < pages; i++ {
			if _, err := fl.WriteAt(bytes.Repeat([]byte("n"), pageSize), int64(i)*pageSize); err != nil {
				t.Fatal(err)
			}
		}
		fl.Close()
		m = powerCycle(t, f, m)
		got := content(t, filepath.Join(m.Dir(), "a"))
		if len(got) != pages*pageSize {
			t.Fatalf("seed %d: size %d, want %d", seed, len(got), pages*pageSize)
		}
		var kept []byte
		for i := 0; i < pages; i++ {
			page := got[i*pageSize : (i+1)*pageSize]
			if page != strings.Repeat(page[:1], pageSize) || (page[0] != 'o' && page[0] != 'n') {
				t.Fatalf("seed %d: page %d is torn inside the page", seed, i)
			}
			kept = append(kept, page[0])
		}
		return string(kept)
	}
	a, b := run(1), run(1)
	if a != b {
		t.Errorf("the same seed kept different pages: %s and %s", a, b)
	}
	if !bytes.ContainsRune([]byte(a), 'n') || !bytes.ContainsRune([]byte(a), 'o') {
		t.Errorf("a torn cut kept %s: want some pages of each", a)
	}
}

// TestRenameAcrossDirectories cuts the power before each request of a
// durable move from one directory to another (rename, fsync of the new
// directory, fsync of the old one, as disk.Rename does), strictly and torn
// with many seeds: the file is always in one of the two directories
// afterwards (a journalling filesystem commits a rename whole), and in the
// new one once the move returned.
func TestRenameAcrossDirectories(t *testing.T) {
	for _, torn := range []float64{0, 0.5} {
		for cutAt := 1; cutAt <= 4; cutAt++ {
			for seed := uint64(1); seed <= 20; seed++ {
				if torn == 0 && seed > 1 {
					break
				}
				f := New(Options{Seed: seed, Torn: torn})
				m := mount(t, f)
				a, b := filepath.Join(m.Dir(), "a"), filepath.Join(m.Dir(), "b")
				for _, d := range []string{a, b} {
					if err := os.Mkdir(d, 0o750); err != nil {
						t.Fatal(err)
					}
				}
				syncDir(t, m.Dir())
				writeFile(t, filepath.Join(a, "f"), []byte("data"), true)
				syncDir(t, a)
				f.CutAfter(cutAt)
				err := move(filepath.Join(a, "f"), filepath.Join(b, "f"))
				m = powerCycle(t, f, m)
				inA := content(t, filepath.Join(m.Dir(), "a", "f"))
				inB := content(t, filepath.Join(m.Dir(), "b", "f"))
				where := fmt.Sprintf("torn %v, cut before request %d of the move, seed %d: a/f %q, b/f %q", torn, cutAt, seed, inA, inB)
				switch {
				case inA != "data" && inB != "data":
					t.Fatalf("%s: the file is gone", where)
				case err == nil && inB != "data":
					t.Fatalf("%s: the move returned, and the file is not in b", where)
				case err == nil && cutAt < 4:
					t.Fatalf("%s: the move succeeded across the cut", where)
				}
				m.Unmount()
			}
		}
	}
}

// move renames src to dst and syncs dst's directory, then src's.
func move(src, dst string) error {
	if err := os.Rename(src, dst); err != nil {
		return err
	}
	for _, dir := range []string{filepath.Dir(dst), filepath.Dir(src)} {
		d, err := os.Open(dir)
		if err != nil {
			return err
		}
		err = d.Sync()
		d.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
