// Package powerfs is a test filesystem that can lose power.
//
// An FS keeps every write in memory. Only an fsync of a file makes that
// file's data (and size) durable, and only an fsync of a directory makes
// that directory's entries (creates, renames, unlinks) durable: the
// guarantees POSIX gives, and no more. Cut "cuts the power": everything not
// yet durable is discarded, and the next mount shows only the durable
// state. With Options.Torn, a cut keeps a seeded random subset of the page
// writes that were not synced and a random prefix of each directory's
// unsynced changes, as a disk that reorders its writes would; a rename from
// one directory to another is kept in both or in neither, as a journalling
// filesystem commits it (strict cuts keep what each directory's fsync made
// durable: after an fsync of only one of the two, the file may be in both,
// or in neither when only the old directory was synced).
//
// A cut can be made on demand (Cut) or at a chosen request (CutWhen,
// CutAfter): the cut happens before that request is carried out, and every
// later request of that mount fails with EIO, so nothing a process does
// after the cut can become durable. The processes using the mount should be
// killed and the mount unmounted before the next Mount, which brings up the
// durable state.
//
// Mounting needs Linux, root and a usable /dev/fuse (Available says why
// not); the FS mounts itself directly, without fusermount. Locks (flock)
// are kept by the kernel, per mount.
//
// Ownership: all state is guarded by one mutex, held for the whole of each
// request, so a cut falls between two requests, never inside one.
package powerfs
