// Package central is the wire contract between an agent and central: the
// stream that holds every store's movements and its settings, the subjects
// agents and operators use (movements, heartbeats, control commands, direct
// gets), the headers a movement message carries and the inbox prefix rule
// the server's permissions rely on.
//
// Its promise: this is the only place the contract is spelled. The client
// side (sync, remote, the provisioning command) and the embedded server
// (hub) both import it, so they cannot drift apart; and it imports nothing
// of this module and nothing of nats-server, only the standard library and
// nats.go, so a client that imports it links no server.
package central
