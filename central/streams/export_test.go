package streams

// ArchiveCaughtUp exposes archiveCaughtUp to the table test.
var ArchiveCaughtUp = archiveCaughtUp
