package doctor

import "golang.org/x/sys/unix"

// Magic numbers of network file systems (statfs(2)).
var networkFS = map[int64]string{
	0x6969:                  "nfs",
	0x517b:                  "smb",
	int64(int32(-11317950)): "cifs", // 0xff534d42
	0xfe534d42:              "smb2",
	0x564c:                  "ncp",
	0x7461636f:              "ocfs2",
	0x65735546:              "fuse",
}

// networkShare reports whether path is on a network file system.
func networkShare(path string) (bool, string) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, ""
	}
	kind, ok := networkFS[int64(st.Type)]
	if kind == "fuse" {
		return false, "" // sshfs and local fuse alike: cannot tell
	}
	return ok, kind
}
