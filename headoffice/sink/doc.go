// Package sink is head office's exactly-once copy of central's archives
// into PostgreSQL, and the views an inspection asks for.
//
// Run reads every archive stream (central.ArchiveStreams) with an ordered
// consumer, from the position the database holds for it, and writes each
// archive message in batches: COPY into a temporary staging table, then one
// INSERT … ON CONFLICT DO NOTHING into movements, keyed by (store_id, key).
// A key already held with the same digest is a repeat (recorded in
// movement_repeats), with another digest a conflict (movement_conflicts,
// never written over the kept row); a message that is not a well-formed
// movement is a reject (sink_rejects, with the header or field it lacks).
//
// Its promise: the position of an archive stream (sink_positions) is
// written in the same transaction as the rows of the messages up to it, and
// is only ever moved forward from the value it had when the batch was read
// (a second sink, or a retry after a commit whose outcome was lost, finds
// it moved and discards what it holds). So each archive message is in the
// database exactly once, whatever restarts, kill -9, PostgreSQL restarts or
// NATS leader changes happen: JetStream's acknowledgements play no part.
//
// The schema is the sink's: numbered SQL files embedded in the binary,
// applied in order, each in one transaction with its version
// (Migrate). Nothing here logs, counts or reports a movement's fields:
// errors and rejects name a header or field, never its value (DESIGN P6).
//
// The package reads central through nats.go and the wire contract in
// central, and checks each payload with the movement model, as the agent
// checks what it takes (a payload the agent would refuse is a reject
// naming the field); it links no other store-side package.
package sink
