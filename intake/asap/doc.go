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
// Its promises: a file reaches done/ only after every movement in it is
// in an fsynced commit and the move itself is durable (both folders
// fsynced); a crash or power cut before that leaves the file where it was,
// and taking it again finds its movements already held, so nothing is
// stored twice (DESIGN P1, P2). A dispense is identified by its
// prescription number, refill number and date filled (DSP02, DSP06,
// DSP05). Only DSP elements are read: PAT, the prescriber's PRE fields,
// AIR and CDI never leave the file (P6); reports and logs name records and
// elements, never values.
package asap
