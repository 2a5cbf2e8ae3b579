//go:build unix

package notary

import "syscall"

// openFlags open the key file without following a symbolic link put in
// its place after it was checked, and without waiting on a pipe.
const openFlags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK
