// Package asap is the ASAP 4.2 drop folder: prescription-monitoring files
// (versions 4.2A and 4.2B) written into a folder are taken, each DSP
// record stored as a controlled dispense movement, and the file moved to
// done/ or, when a record was refused, to rejected/ with a JSON report.
//
// Completion rule: a file is taken once its last segment is a TT trailer
// (TT01 matching TH02, TT02 counting every segment); a file still being
// written has no TT yet and is left for the next look. Names beginning
// with '.' or ending in .tmp or .part are never taken, so writing under
// such a name and renaming in works too.
//
// Its promises: a file is moved to done/ only after every movement in it
// is in an fsynced commit, and it counts as done (status files_done, the
// ASAP_FILE_DONE log line) only once the move is durable (both folders
// fsynced). A rename shows before it is durable: a power cut in between
// may bring the file back to the folder, never lose it. A crash or power
// cut before the file counts as done leaves it in the folder (or in done/),
// and taking it again finds its movements already held, so nothing is
// stored twice (DESIGN P1, P2). A dispense is identified by its
// prescription number, refill number and date filled (DSP02, DSP06,
// DSP05). Only DSP elements are read: PAT, the prescriber's PRE fields,
// AIR and CDI never leave the file (P6); reports and logs name records and
// elements, never values.
//
// A file taken is the file that was read (P10). It is opened once, without
// following a link and without blocking, checked to be a regular file on
// its descriptor, read from that descriptor, and moved only if its name
// still refers to it, unchanged. A file replaced or written to while it
// was read is stored as it was read and kept in done/ (or rejected/) as
// such; what its name holds then is taken at the next scan. What the
// folder cannot take (a link, FIFO, device or folder; a file it may not
// read; one written to while read; one it cannot move out) is set aside:
// left where it is, counted (status files_set_aside), logged once
// (ASAP_FILE_SET_ASIDE, a bounded number of lines a scan), and tried again
// at each scan; it never keeps the files after it from being taken. Names
// in done/ and rejected/ always fit the file system: a longer one is cut
// and ends in a hash of the whole. Nothing waits without a bound, so Run
// returns soon after its context ends.
//
// Memory is bounded by the file's size, not by what it holds: Parse walks
// the file once, counting segments and elements against their limits
// before anything is split, and keeps no segment; records are mapped,
// stored and reported ChunkRecords at a time; a report lists at most
// MaxReportedRecords refused records.
package asap
