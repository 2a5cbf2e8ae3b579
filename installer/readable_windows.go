package installer

import "golang.org/x/sys/windows"

// readableByOthers reads the DACL of path as Windows applies it
// (inherited entries included).
func readableByOthers(path string) bool {
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return false
	}
	return len(broadReaders(sd.String())) > 0
}
