//go:build !linux

package powerfs

import "errors"

// Available reports why an FS cannot be mounted here: it needs Linux.
func Available() error { return errors.New("powerfs: needs Linux (FUSE)") }

// Mount is the FS mounted on a directory; it exists only on Linux.
type Mount struct{}

// Mount fails: mounting needs Linux.
func (f *FS) Mount(dir string) (*Mount, error) { return nil, Available() }

// Dir is the directory the FS is mounted on.
func (m *Mount) Dir() string { return "" }

// Unmount does nothing.
func (m *Mount) Unmount() error { return nil }
