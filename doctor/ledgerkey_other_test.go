//go:build !windows

package doctor

import "testing"

// privateDir: a temporary directory is its creator's, mode 0700.
func privateDir(*testing.T, string) {}
