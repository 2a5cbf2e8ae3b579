package installer

import (
	"strings"

	"golang.org/x/sys/windows"
)

// readableByOthers reads the DACL of path as Windows applies it
// (inherited entries included).
func readableByOthers(path string) bool {
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return false
	}
	return len(broadReaders(sd.String())) > 0
}

func serviceCanRead(path, dataDir string) (string, bool, error) {
	dsd, err := windows.GetNamedSecurityInfo(dataDir, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return "", false, err
	}
	ksd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return "", false, err
	}
	sids := serviceSIDs(dsd.String())
	names := make([]string, len(sids))
	ok := true
	for i, sid := range sids {
		names[i] = accountName(sid)
		ok = ok && sidReads(ksd.String(), sid)
	}
	return strings.Join(names, ", "), ok, nil
}

// accountName is the DOMAIN\name of a SID, or the SID when it has none.
func accountName(sid string) string {
	fallback := sid
	if sid == serviceSID(ServiceName) {
		// Windows names a virtual account only once its service exists.
		fallback = windowsVirtual
	}
	s, err := windows.StringToSid(sid)
	if err != nil {
		return fallback
	}
	name, domain, _, err := s.LookupAccount("")
	if err != nil {
		return fallback
	}
	if domain == "" {
		return name
	}
	return domain + `\` + name
}
