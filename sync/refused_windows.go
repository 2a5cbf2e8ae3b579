package sync

import "golang.org/x/sys/windows"

// errRefused is the error number of a refused TCP connection.
var errRefused error = windows.WSAECONNREFUSED
