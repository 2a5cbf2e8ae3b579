// Package hub is the local central: an embedded nats-server with JetStream
// on disk and central's streams provisioned (the movement stream
// RX_MOVEMENTS, its archive RX_ARCHIVE and the fleet view KV_RX_FLEET), as
// run by `agent hub`, `agent run --dev`, the benchmarks and the tests.
//
// Its promise is the same as the production central's: a publish the hub
// acknowledged was written to the stream's files and fsynced before the
// acknowledgement left the server (JetStream sync_interval "always"), unless
// Options.NoSync asked for the non-durable comparison. The stream refuses a
// second message for a subject, so a movement key is stored at most once.
//
// The streams' settings are central.StreamConfig and central.ArchiveConfig;
// Provision applies them, for every partition of a partitioned central,
// never lowering a movement stream's max_age before its archive has copied
// it, and works against any server, so `agent provision` uses the same code
// for a real cluster as the hub uses for itself. CentralConfig writes the
// production server configuration: an account per store, whose imports map
// the subjects its agent always uses onto its partition's.
package hub
