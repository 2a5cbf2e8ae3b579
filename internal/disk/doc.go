// Package disk reports free disk space, for the status of the agent's data
// file.
package disk
