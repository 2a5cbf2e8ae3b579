// Package installer runs the agent as a system service on Linux (systemd)
// and Windows (service control manager), on top of kardianos/service.
//
// Its promise: what `agent install --dry-run` prints is exactly what
// `agent install` does. Prepare turns a Spec into a Plan with no side
// effects and no dependence on the machine it runs on, so the Windows plan
// can be rendered and reviewed on Linux and the other way round; Install
// executes that same Plan, step by step, in the order it was rendered.
//
// Install never overwrites an existing ingest token or config file, and
// Uninstall removes only the service definition: the config, the token and
// the data directory (the bbolt file with every unsynced movement) are
// kept, and their paths are printed.
//
// A new config is the example config with a few keys set (store_id,
// data_dir, ingest.token_file, nats): Template sets them line by line, so
// every other line and comment of the example stays as it is.
//
// Run is what `agent run` calls: under a service manager Start launches the
// agent's run function and returns at once, Stop cancels it and waits for it
// with a deadline; run interactively, SIGINT or SIGTERM does the same.
package installer
