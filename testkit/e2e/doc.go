// Package e2e holds end-to-end tests of the built agent binary run as a
// child process: SIGKILL at random moments under concurrent load, a full
// disk, a second agent on the same data directory. It has no code of its
// own.
package e2e
