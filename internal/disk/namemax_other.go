//go:build !linux

package disk

// NameMax is the longest name, in bytes, an entry of dir may have: 255,
// the limit of NTFS (in UTF-16 units, never more than a name's UTF-8
// bytes), APFS and the common Unix file systems.
func NameMax(dir string) int { return defaultNameMax }
