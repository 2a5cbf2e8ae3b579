// Package disk holds the agent's file-system helpers: free disk space, for
// the status of the agent's data file; durable writes and renames (a
// rename returns once it survives a power cut); and opening a file in a
// folder others write to without following a link there, so that what is
// read is the file that was opened (OpenNoFollow) under a name the file
// system can hold (NameMax).
package disk
