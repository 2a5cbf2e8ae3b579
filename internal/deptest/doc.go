// Package deptest checks the shape of the module: the direction of its
// dependencies and that every package states its promise in a doc
// comment. It has no code of its own; see its test.
package deptest
