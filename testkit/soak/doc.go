// Package soak holds the soak test: the built agent binary runs for a set
// time against a real embedded hub behind a fault proxy, with movements
// submitted continuously over HTTP while random faults strike — the agent
// killed with SIGKILL and restarted, the hub stopped and started again,
// the network cut or turned into a black hole, the disk full (a file-size
// limit), the quarantine redriven. At the end, with every fault healed and
// the backlog drained, every movement the agent acknowledged must be stored
// centrally exactly once or quarantined locally with a reason, and the data
// file must pass the queue's invariant check.
//
// It is off by default. Run it with a duration:
//
//	RXEDGE_SOAK=2m go test ./testkit/soak/ -run Soak -v
//	RXEDGE_SOAK=30m go test ./testkit/soak/ -run Soak -v -timeout 45m
//
// RXEDGE_SOAK_SEED repeats a run's random choices (faults and
// submissions; the timing of a real system still differs). The disk-full
// fault needs prlimit (util-linux); without it that fault is skipped with a
// note in the log. The package has no code of its own.
package soak
