//go:build !unix

package notary

// openFlags: LoadKey's check of what is at the path is all there is.
const openFlags = 0
