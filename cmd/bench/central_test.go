package main

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"
)

// TestMain lets the test binary be the central scenario's server process,
// as the bench binary is: startServerProc runs os.Executable() with
// -central-server.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "-central-server" {
		if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestCentralScenario runs the central scenario at a tiny size: both
// layouts are filled, killed, restarted and measured, and the partitions
// compared, and every figure it promises comes out.
func TestCentralScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the central scenario reads /proc")
	}
	b, log := tinyBench(t)
	b.size.centralKeys, b.size.digestGets = 10_000, 50
	b.size.partRounds, b.size.partRound, b.size.partConns = 1, 300*time.Millisecond, 8
	b.size.fillAge, b.size.cacheSettle = 2*time.Second, 0
	if err := benchCentral(context.Background(), b); err != nil {
		t.Fatalf("central: %v\n%s", err, log)
	}
	got := b.rep.json()
	for _, name := range []string{
		"central_rss_bytes_per_key_old_10k", "central_rss_bytes_per_key_new_10k",
		"central_restart_after_kill_seconds_old_10k", "central_restart_after_kill_seconds_new_10k",
		"central_partitions_4_vs_1", "central_ram_per_node_bytes_1_6b_estimate",
	} {
		if v, ok := got.Figures[name]; !ok || !(v > 0) {
			t.Errorf("figure %s = %v (present %v), want a positive number", name, v, ok)
		}
	}
	for _, name := range []string{"central_digest_check_rss_growth_bytes_random", "central_digest_check_rss_growth_bytes_recent"} {
		if _, ok := got.Figures[name]; !ok {
			t.Errorf("figure %s missing", name)
		}
	}
}
