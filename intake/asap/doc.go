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
package asap
