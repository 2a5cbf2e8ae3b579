package control

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// ErrPipeSquatted is returned (on Windows) when the control pipe is owned
// by an account that cannot be the agent's: nothing was sent to it.
var ErrPipeSquatted = errors.New("control: the control pipe is held by a process that is not the agent (another account created it under the agent's name): nothing was sent to it; find and stop that process, then start the agent")

// The control channel is how the CLI reaches a running agent: a unix
// socket file in the data directory on Linux, a named pipe on Windows.
// Endpoint, in channel_unix.go and channel_windows.go, is the one place
// both the agent (Listen) and the client (Dial) find it from the data
// directory, so the two cannot disagree.
//
// The functions in this file are pure, and used on every system so their
// tests run everywhere; only Windows listens on what they describe.

// PipePrefix starts the name of every agent's control pipe.
const PipePrefix = `\\.\pipe\rxedge-agent-`

// PipeName returns the named pipe of the agent whose data directory is
// dataDir, an absolute Windows path. The name carries a hash of the
// directory, so two agents on one machine (a test install beside the
// service) never share a pipe, and a directory spelled with other case,
// forward slashes or a trailing separator names the same pipe, as it names
// the same directory on Windows.
func PipeName(dataDir string) string {
	d := strings.ReplaceAll(dataDir, "/", `\`)
	if len(d) > 3 { // keep C:\ whole
		d = strings.TrimRight(d, `\`)
	}
	sum := sha256.Sum256([]byte(strings.ToLower(d)))
	return PipePrefix + hex.EncodeToString(sum[:8])
}

// Well-known SIDs the pipe's descriptor names.
const (
	sidSystem         = "SY" // LocalSystem
	sidAdministrators = "BA" // BUILTIN\Administrators
)

// PipeSDDL returns the security descriptor of the control pipe: a
// protected DACL (nothing inherited) granting full access to LocalSystem,
// the Administrators group, and owner, the SID of the account the agent
// runs as (the service's virtual account NT SERVICE\rxedge-agent, or the
// user of a foreground `agent run`), which needs it to open the pipe's
// further instances. Nobody else may open it: an unprivileged user, or an
// administrator whose token is not elevated, is refused by Windows before
// the agent sees a byte, like the 0600 socket on Linux. An owner that is
// LocalSystem or Administrators adds no entry; one that is empty or not a
// SID string adds nothing at all.
//
// A valid owner is also made the pipe's owner (O:), rather than whatever
// the token's default owner is, so a client can tell the agent's pipe from
// one another account created under its name (TrustedPipeOwner).
func PipeSDDL(owner string) string {
	if !validSID(owner) {
		return "D:P(A;;GA;;;" + sidSystem + ")(A;;GA;;;" + sidAdministrators + ")"
	}
	sddl := "O:" + owner + "D:P(A;;GA;;;" + sidSystem + ")(A;;GA;;;" + sidAdministrators + ")"
	if owner != "S-1-5-18" && owner != "S-1-5-32-544" {
		sddl += "(A;;GA;;;" + owner + ")"
	}
	return sddl
}

// validSID reports whether s is a SID in string form (S-1-…, digits and
// dashes only), so nothing else can be spliced into the descriptor.
func validSID(s string) bool {
	if !strings.HasPrefix(s, "S-1-") || len(s) > 200 {
		return false
	}
	parts := strings.Split(s[len("S-1-"):], "-")
	for _, p := range parts {
		if p == "" || len(p) > 20 || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return len(parts) >= 2
}

// TrustedPipeOwner reports whether a control pipe owned by the SID owner
// can be the agent's, for a client running as self: pipes the service
// creates are owned by LocalSystem, the Administrators group or a service
// SID (S-1-5-80-…), and a foreground `agent run` by its own user. Any
// other owner is a process that took the pipe's name before the agent
// (which any local user can do while the agent is stopped), and the client
// must send it nothing: commands carry movements and operators' reasons.
func TrustedPipeOwner(owner, self string) bool {
	switch {
	case owner == "":
		return false
	case owner == "S-1-5-18", owner == "S-1-5-32-544":
		return true
	case strings.HasPrefix(owner, "S-1-5-80-") && validSID(owner):
		return true
	}
	return owner == self && validSID(self)
}
