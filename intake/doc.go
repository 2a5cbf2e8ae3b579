// Package intake takes movements the way pharmacy systems already send
// them — HL7 v2 dispense messages over MLLP (package intake/hl7) and ASAP
// 4.2 prescription-monitoring files dropped in a folder (package
// intake/asap) — and hands them to the queue through the same group
// commit as the HTTP ingest.
//
// Its promises: a sender is told a movement was taken (an HL7 AA, a file
// moved to done/) only after the movement is in an fsynced commit
// (DESIGN P1); the same dispense sent again, under any message id or in
// any file, has the same movement id and so is stored once (P2); and
// nothing from a patient segment (HL7 PID, PV1, NK1, IN1; ASAP PAT) or a
// prescriber's personal fields is ever read into a movement, a log line, a
// counter or an error text (P6): the mappings read only the fields they
// name, and errors name places, never values.
package intake
