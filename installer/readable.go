package installer

import (
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// ReadableByOthers returns those of paths that every local user may read:
// on Linux a file with the "other" read bit; on Windows one whose DACL
// lets Everyone, Users, Authenticated Users, Interactive, Guests or
// Anonymous read it, or that has no DACL at all. Empty paths, and paths
// that do not exist or whose permissions cannot be read, are left out.
func ReadableByOthers(paths ...string) []string {
	var out []string
	for _, p := range paths {
		if p != "" && readableByOthers(p) {
			out = append(out, p)
		}
	}
	return out
}

// PrivateFix is the command that makes path readable only by its owner
// (Linux) or by SYSTEM, Administrators and the service (Windows).
func PrivateFix(path string) string {
	if runtime.GOOS == "windows" {
		return fmt.Sprintf(`icacls "%s" /inheritance:r /remove:g *S-1-1-0 *S-1-5-32-545 *S-1-5-11 *S-1-5-4 *S-1-5-32-546 *S-1-5-7 (keep SYSTEM, Administrators and %s)`, path, windowsVirtual)
	}
	return "chmod o-rwx " + path
}

// broadGroups are the SIDs every local user holds (or that need no logon),
// by SDDL alias and by SID string, with their names.
var broadGroups = map[string]string{
	"WD": "Everyone", "S-1-1-0": "Everyone",
	"BU": "Users", "S-1-5-32-545": "Users",
	"AU": "Authenticated Users", "S-1-5-11": "Authenticated Users",
	"IU": "Interactive", "S-1-5-4": "Interactive",
	"BG": "Guests", "S-1-5-32-546": "Guests",
	"AN": "Anonymous", "S-1-5-7": "Anonymous",
}

// readRights are the SDDL rights that let a holder read a file's content.
// ("CC" is how SDDL prints FILE_READ_DATA, the directory-service name of bit 0.)
var readRights = []string{"GA", "GR", "FA", "FR", "CC"}

// Access mask bits that let a holder read a file's content.
const (
	maskReadData   = 0x1        // FILE_READ_DATA
	maskGenericAll = 0x10000000 // GENERIC_ALL
	maskGenericRd  = 0x80000000 // GENERIC_READ
)

var aceRE = regexp.MustCompile(`\(([^()]*)\)`)

// broadReaders returns the names of the groups of every local user that
// the DACL of the security descriptor sddl lets read the object itself:
// allow entries that are not inherit-only, with a read right. A null DACL
// lets everybody do anything.
func broadReaders(sddl string) []string {
	i := strings.Index(sddl, "D:")
	if i < 0 {
		return nil // no DACL part given: nothing is known
	}
	dacl := sddl[i+2:]
	if j := strings.Index(dacl, "S:"); j >= 0 && !strings.Contains(dacl[:j], "(") {
		dacl = dacl[:j]
	} else if j := strings.LastIndex(dacl, ")S:"); j >= 0 {
		dacl = dacl[:j+1]
	}
	if strings.HasPrefix(dacl, "NO_ACCESS_CONTROL") {
		return []string{"Everyone (no DACL)"}
	}
	var out []string
	seen := map[string]bool{}
	for _, m := range aceRE.FindAllStringSubmatch(dacl, -1) {
		f := strings.Split(m[1], ";")
		if len(f) < 6 || f[0] != "A" || strings.Contains(f[1], "IO") {
			continue
		}
		name, ok := broadGroups[strings.ToUpper(f[5])]
		if !ok || seen[name] || !grantsRead(f[2]) {
			continue
		}
		seen[name] = true
		out = append(out, name)
	}
	return out
}

// grantsRead reports whether the rights field of an ACE lets its holder
// read a file.
func grantsRead(rights string) bool {
	if strings.HasPrefix(rights, "0x") || strings.HasPrefix(rights, "0X") {
		m, err := strconv.ParseUint(rights[2:], 16, 32)
		return err != nil || m&(maskReadData|maskGenericAll|maskGenericRd) != 0
	}
	for k := 0; k+2 <= len(rights); k += 2 {
		for _, r := range readRights {
			if rights[k:k+2] == r {
				return true
			}
		}
	}
	return false
}

// ServiceCanRead reports whether the account the agent's service runs as
// may read path, and names the account. The account is found from the
// data directory, which install gives the service: on Linux its owner; on
// Windows the account its DACL grants access beside SYSTEM and the
// Administrators (SYSTEM itself when there is none, as for a service
// installed to run as LocalSystem).
func ServiceCanRead(path, dataDir string) (account string, ok bool, err error) {
	return serviceCanRead(path, dataDir)
}

// sidAliases are the SDDL aliases of the SIDs a service account can be.
var sidAliases = map[string]string{"SY": sidSystem, "LS": sidLocalService, "NS": sidNetworkService, "BA": sidAdministrators}

func canonSID(s string) string {
	s = strings.ToUpper(s)
	if sid, ok := sidAliases[s]; ok {
		return sid
	}
	return s
}

// allowEntries returns the allow entries of the DACL of sddl that apply
// to the object itself (not inherit-only): SID (canonical) and rights.
func allowEntries(sddl string) [][2]string {
	i := strings.Index(sddl, "D:")
	if i < 0 {
		return nil
	}
	dacl := sddl[i+2:]
	if j := strings.LastIndex(dacl, ")S:"); j >= 0 {
		dacl = dacl[:j+1]
	}
	var out [][2]string
	for _, m := range aceRE.FindAllStringSubmatch(dacl, -1) {
		f := strings.Split(m[1], ";")
		if len(f) < 6 || f[0] != "A" || strings.Contains(f[1], "IO") {
			continue
		}
		out = append(out, [2]string{canonSID(f[5]), f[2]})
	}
	return out
}

// serviceSIDs are the SIDs the DACL sddl of the data directory grants
// access beside SYSTEM, the Administrators, the creator owner and the
// groups of every local user: the service's account (install grants it
// modify). SYSTEM when there is none.
func serviceSIDs(sddl string) []string {
	var out []string
	for _, e := range allowEntries(sddl) {
		sid := e[0]
		if _, broad := broadGroups[sid]; broad || sid == sidSystem || sid == sidAdministrators || sid == "CO" || sid == "S-1-3-0" || slices.Contains(out, sid) {
			continue
		}
		out = append(out, sid)
	}
	if len(out) == 0 {
		out = []string{sidSystem}
	}
	return out
}

// sidReads reports whether the DACL sddl lets sid read the object (an
// allow entry of its own with a read right; a null DACL lets everybody).
func sidReads(sddl, sid string) bool {
	if i := strings.Index(sddl, "D:"); i >= 0 && strings.HasPrefix(sddl[i+2:], "NO_ACCESS_CONTROL") {
		return true
	}
	sid = canonSID(sid)
	for _, e := range allowEntries(sddl) {
		if e[0] == sid && grantsRead(e[1]) {
			return true
		}
	}
	return false
}
