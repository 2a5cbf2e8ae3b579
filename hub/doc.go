// Package hub is the local central's server: an embedded nats-server with
// JetStream on disk, as run by `hq hub`, `agent run --dev`, the
// benchmarks and the tests. It knows nothing of central's streams: a
// caller that wants them passes the provisioner of central/streams
// (streams.Provision) as Options.Provision.
//
// Its promise is the same as the production central's: a publish the hub
// acknowledged was written to the stream's files and fsynced before the
// acknowledgement left the server (JetStream sync_interval "always"), unless
// Options.NoSync asked for the non-durable comparison.
package hub
