//go:build !linux && !windows

package doctor

// networkShare cannot tell on this system.
func networkShare(string) (bool, string) { return false, "" }
