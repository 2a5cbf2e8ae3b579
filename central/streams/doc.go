// Package streams creates central's streams and brings existing ones to
// the product's settings: for every partition the movement stream
// (central.StreamConfig) and its archive (central.ArchiveConfig), then the
// fleet view KV_RX_FLEET and the witness stream RX_WITNESS. Head office's
// `hq provision` runs it against a real cluster, and the embedded hub
// (`hq hub`, the store's `agent run --dev`, the tests) against itself, so
// both sides use the same code without the store linking head office.
//
// Its promise: Provision never has the server age out a movement that the
// archive has not copied, and it changes only the settings it manages,
// saying which, so running it again is safe.
package streams
