// Package provision writes central's production server configuration
// from a roster of stores (CentralConfig): an account per store, whose
// imports map the subjects its agent always uses onto its partition's,
// and the grants of the head-office users (admin, ops, audit, migrate,
// witness), each only what its work needs (DESIGN P7); and it reads the
// roster (ParseRoster), with each store's ledger keys. Creating and
// updating the streams themselves is central/streams' work, which the
// store's development hub shares.
package provision
