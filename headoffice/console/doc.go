// Package console is head office's console in the browser, a part of
// hq served on its own listener: the fleet at a glance from the fleet
// index (fleet.Index), a store's status and quarantine asked of the
// store with signed commands, redrives of one store's selected movements
// or of a filtered set of stores, findings, problems, movement records
// and their inclusion proofs.
//
// Promises:
//
//   - Pages are rendered on the server from embedded templates and one
//     embedded style sheet; no script runs (the Content-Security-Policy
//     allows none), nothing is loaded from elsewhere, and no page may be
//     framed.
//   - The fleet page reads the index only: its cost is the stores a
//     filter matches and one page of them, whatever the archive or the
//     number of requests.
//   - Who may do what: every request is authenticated (a client
//     certificate from the chain's CA, a trusted reverse proxy's header
//     accepted only from the proxy's addresses, or the dev mode's
//     one-time link on loopback) and needs a role (viewer, operator,
//     auditor). A state-changing request needs its session's CSRF token
//     and passes Go's cross-origin protection; a refused action is
//     journalled.
//   - Actions are signed as the CLI's are (fleet.Client), one command per
//     store signed as it is sent, carrying the console user (the store
//     journals it), and are recorded in hq's journal before anything is
//     sent and again with each store's result.
//   - No patient data (DESIGN P6): the pages show what the CLI shows
//     (keys, counts, states, reasons, times); never a payload, a note or
//     a prescription reference, which a lookup takes in a posted form
//     and never shows back.
package console
