// Package provision sets central up, at head office: it creates and
// updates central's streams (the movement streams, their archives and the
// fleet view KV_RX_FLEET) with the settings of central.StreamConfig and
// central.ArchiveConfig, for every partition of a partitioned central,
// and writes the production server configuration from a roster of stores.
//
// Provision never lowers a movement stream's max_age before its archive
// has copied it, and works against any server, so `agent provision` uses
// the same code for a real cluster as the embedded hub uses for itself. CentralConfig writes an account per store, whose imports map the
// subjects its agent always uses onto its partition's, and the grants of
// the head-office users (admin, ops, audit, migrate), each only what its
// work needs (DESIGN P7).
package provision
