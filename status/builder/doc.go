// Package builder assembles the store's status document (package status)
// from the queue's counters (no scan), the sender's connection and the
// recent rates, in the agent and in the CLI reading a stopped agent's
// file. It holds counts, states, times and reasons only — never movement
// payloads (DESIGN P6). The document itself stays in package status, which
// links no bbolt, so head office can read what a store answers.
package builder
