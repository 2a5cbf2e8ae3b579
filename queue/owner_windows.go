package queue

// ownLikeDir does nothing on Windows: a new file inherits the data
// directory's ACL, which grants the service and administrators access.
func ownLikeDir(string) error { return nil }
