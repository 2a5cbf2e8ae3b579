package daemon

// ignoreFileSizeLimit has nothing to do on Windows: a full disk is an error
// from the write, not a signal.
func ignoreFileSizeLimit() {}
