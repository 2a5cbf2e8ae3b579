// Package packaging holds the Linux packages' maintainer scripts and the
// Windows installer script (no Go code); its tests run the scripts.
package packaging
