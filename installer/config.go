package installer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
)

// ErrConfigMissing: `agent run` found no config file.
var ErrConfigMissing = errors.New("installer: config file not found")

// ResolveConfig returns the config file `agent run` should read: flag when
// given, else the OS default (DefaultPaths(runtime.GOOS).ConfigFile). When
// the file does not exist the error says how to get one; when it cannot be
// read for lack of rights, it says to run elevated.
func ResolveConfig(flag string) (string, error) {
	return resolveConfig(flag, DefaultPaths(runtime.GOOS).ConfigFile)
}

func resolveConfig(flag, def string) (string, error) {
	path := flag
	if path == "" {
		path = def
	}
	f, err := os.Open(path)
	switch {
	case err == nil:
		f.Close()
		return path, nil
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%w: %s; run `agent install` as root/Administrator to write the default config there, or copy the example configs/agent.example.yaml there and edit it, or pass --config", ErrConfigMissing, path)
	case errors.Is(err, fs.ErrPermission):
		return "", fmt.Errorf("installer: read config %s: %w; it is readable only by administrators and the service account: run as root/Administrator, or use --config", path, err)
	}
	return "", fmt.Errorf("installer: read config %s: %w", path, err)
}
