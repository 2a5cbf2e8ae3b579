package installer

import (
	"github.com/rxedge/agent/notary"

	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"strings"
	"time"
	"unicode/utf16"
)

// Well-known SIDs.
const (
	sidSystem         = "S-1-5-18"
	sidLocalService   = "S-1-5-19"
	sidNetworkService = "S-1-5-20"
	sidAdministrators = "S-1-5-32-544"
)

// Access masks in SDDL and icacls form.
var rightsMask = map[string]string{
	"F":  "FA",       // FILE_ALL_ACCESS
	"M":  "0x1301bf", // modify: read, write, execute, delete
	"RX": "0x1200a9", // read and execute (list and traverse a directory)
	"R":  "0x120089", // read
}

// prepareWindows fills the Windows parts of p.
func prepareWindows(p *Plan) {
	ps := p.Paths
	sid, _ := windowsAccountSID(ps.User) // checked by checkUser
	admins := []ACE{
		{SID: sidSystem, Name: "SYSTEM", Rights: "F", Inherit: true},
		{SID: sidAdministrators, Name: `BUILTIN\Administrators`, Rights: "F", Inherit: true},
	}
	withService := func(rights string, inherit bool) []ACE {
		acl := append([]ACE(nil), admins...)
		for i := range acl {
			acl[i].Inherit = inherit
		}
		if sid != sidSystem {
			acl = append(acl, ACE{SID: sid, Name: ps.User, Rights: rights, Inherit: inherit})
		}
		return acl
	}
	p.Dirs = []Dir{
		{Purpose: "config", Path: ps.ConfigDir, Perm: Perm{ACL: withService("RX", true)}},
		{Purpose: "data", Path: ps.DataDir, Perm: Perm{ACL: withService("M", true)}},
	}
	p.Token = File{Purpose: "ingest token", Path: ps.TokenFile, Perm: Perm{ACL: withService("R", false)}}
	p.Config = File{Purpose: "config", Path: ps.ConfigFile, Perm: Perm{ACL: withService("R", false)}}
	p.LedgerKey = File{Purpose: "ledger signing key", Path: joinPath("windows", ps.DataDir, notary.KeyFileName), Perm: Perm{ACL: withService("R", false)}}

	bin := escapeArg(p.Executable)
	for _, a := range p.Args {
		bin += " " + escapeArg(a)
	}
	recovery := make([]time.Duration, restartAttempts)
	for i := range recovery {
		recovery[i] = restartDelay
	}
	p.Windows = &WindowsService{
		BinaryPath:       bin,
		Account:          ps.User,
		AccountSID:       sid,
		StartType:        "automatic",
		DelayedAutoStart: true,
		Recovery:         recovery,
		ResetPeriod:      resetPeriod,
		EventSource:      ps.ServiceName,
	}
}

// windowsAccountSID returns the SID of a service account name that needs
// no password, and whether the name is one.
func windowsAccountSID(name string) (string, bool) {
	switch strings.ToLower(name) {
	case "localsystem", `nt authority\system`:
		return sidSystem, true
	case `nt authority\localservice`:
		return sidLocalService, true
	case `nt authority\networkservice`:
		return sidNetworkService, true
	case strings.ToLower(windowsVirtual):
		return serviceSID(ServiceName), true
	}
	return "", false
}

// serviceSID computes the SID Windows gives the service name and its
// virtual account NT SERVICE\name: S-1-5-80- followed by the SHA-1 of the
// upper-cased UTF-16LE name read as five little-endian 32-bit numbers (what
// `sc showsid` prints).
func serviceSID(name string) string {
	u := utf16.Encode([]rune(strings.ToUpper(name)))
	buf := make([]byte, 2*len(u))
	for i, c := range u {
		binary.LittleEndian.PutUint16(buf[2*i:], c)
	}
	sum := sha1.Sum(buf)
	sid := "S-1-5-80"
	for i := 0; i < 5; i++ {
		sid += fmt.Sprintf("-%d", binary.LittleEndian.Uint32(sum[4*i:]))
	}
	return sid
}

// SDDL returns the protected DACL of p in SDDL form, as install applies it.
func (p Perm) SDDL() string {
	var b strings.Builder
	b.WriteString("D:P")
	for _, a := range p.ACL {
		flags := ""
		if a.Inherit {
			flags = "OICI"
		}
		fmt.Fprintf(&b, "(A;%s;%s;;;%s)", flags, rightsMask[a.Rights], a.SID)
	}
	return b.String()
}

// rightsName names icacls rights for the reader.
var rightsName = map[string]string{"F": "full control", "M": "modify", "RX": "read and execute", "R": "read"}

// grants describes the DACL of p in words.
func (p Perm) grants() string {
	var parts []string
	inherit := false
	for _, a := range p.ACL {
		parts = append(parts, a.Name+" "+rightsName[a.Rights])
		inherit = inherit || a.Inherit
	}
	s := strings.Join(parts, ", ")
	if inherit {
		s += " (inherited by everything created inside)"
	}
	return s
}

// icacls returns the icacls command that sets the same DACL on path, for
// the reader of a dry run.
func (p Perm) icacls(path string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `icacls "%s" /inheritance:r /grant:r`, path)
	for _, a := range p.ACL {
		flags := ""
		if a.Inherit {
			flags = "(OI)(CI)"
		}
		fmt.Fprintf(&b, ` "*%s:%s%s"`, a.SID, flags, a.Rights)
	}
	return b.String()
}

// escapeArg quotes s the way syscall.EscapeArg does on Windows, which is
// how golang.org/x/sys/windows/svc/mgr builds a service's image path.
func escapeArg(s string) string {
	if s == "" {
		return `""`
	}
	if !strings.ContainsAny(s, "\"\\ \t") {
		return s
	}
	hasSpace := strings.ContainsAny(s, " \t")
	if !strings.ContainsAny(s, `"\`) {
		return `"` + s + `"`
	}
	var b strings.Builder
	if hasSpace {
		b.WriteByte('"')
	}
	slashes := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		default:
			slashes = 0
		case '\\':
			slashes++
		case '"':
			for ; slashes > 0; slashes-- {
				b.WriteByte('\\')
			}
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	if hasSpace {
		for ; slashes > 0; slashes-- {
			b.WriteByte('\\')
		}
		b.WriteByte('"')
	}
	return b.String()
}
