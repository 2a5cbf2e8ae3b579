// Package configs holds the configuration files the agent ships: the
// example agent configuration, which `agent install` writes as the
// service's config when none exists, and the nats-server configurations
// for a development hub and for production permissions.
package configs

import _ "embed"

// AgentExample is agent.example.yaml, byte for byte. Callers must not
// modify it.
//
//go:embed agent.example.yaml
var AgentExample []byte
