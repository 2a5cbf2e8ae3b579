// Package hub is the local central: an embedded nats-server with JetStream
// on disk and the RX_MOVEMENTS stream provisioned, as run by `agent hub`,
// `agent run --dev`, the benchmarks and the tests.
//
// Its promise is the same as the production central's: a publish the hub
// acknowledged was written to the stream's files and fsynced before the
// acknowledgement left the server (JetStream sync_interval "always"), unless
// Options.NoSync asked for the non-durable comparison. The stream refuses a
// second message for a subject, so a movement key is stored at most once.
//
// The stream's settings are central.StreamConfig; Provision applies them
// and works against any server, so `agent provision` uses the same code for
// a real cluster as the hub uses for itself.
package hub
