// Package reconcile is head office's reconciliation of central's archive
// against what each store acknowledged. Set holds the sequences of one
// store as ranges, so its memory grows with the gaps, not with the
// movements.
package reconcile
