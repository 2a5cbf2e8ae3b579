// Package hl7 is the HL7 v2 intake: an MLLP listener (Server) that takes
// pharmacy dispense messages, RDS^O13 and RDS^O01, and stores each RXD as
// a dispense movement (a return when its quantity is negative).
//
// It is built in three parts that know one thing each: FrameReader knows
// MLLP framing only (bytes outside frames skipped, a bound on a frame,
// refused without buffering it); Parse knows segments and fields only
// (delimiters from MSH-1 and MSH-2; segments, fields, repetitions,
// components and subcomponents counted against their limits, each a named
// constant, in one pass before anything is kept, so a message costs about
// its size whatever it is made of; fields, repetitions, components and
// escape sequences found and decoded on access; errors naming a place and
// never a value); Dispenses maps RXD and RXE fields to a
// movement and reads nothing else, so PID, PV1, NK1, IN1 and every other
// segment never leave the message (DESIGN P6).
//
// Its promise (DESIGN P1): an AA is written only after the message's
// movements are in an fsynced commit, the same group commit as the HTTP
// ingest; a message refused with AE or AR stored nothing. A dispense is
// identified by its prescription number and dispense sub-ID counter
// (RXD-7, RXD-1), so the same dispense resent under a new message control
// id is answered AA and stored once. Acknowledgements are original mode:
// MSH-15 and MSH-16 (enhanced mode) are read and ignored.
package hl7
