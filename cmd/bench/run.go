package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// usageError is a mistake on the command line (exit code 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// scenarioNames lists the scenarios in the order they run.
// The central scenario is heavy: it runs only when -central or -only
// names it.
var scenarioNames = []string{"ingest", "sync", "drain", "bulk", "scale", "herd", "compact", "intake", "sink", "verify", "ledger", "console", "central", "archive"}

// sizes are the sizes of one run.
type sizes struct {
	quick bool

	ingestN      int // movements posted over HTTP and enqueued in-process
	naiveN       int // movements of the naive baseline (a rate: fewer suffice)
	ingestConns  int // concurrent clients / goroutines
	ingestRounds int // turns the naive baseline and the agent take

	syncN      int // backlog of the sync scenario
	syncRounds int // turns the raw baseline and the trickle take

	drainN      int // backlog of the drain scenario
	drainRounds int // turns the raw atomic publisher and the drains take
	bytesN      int // pending movements the data file's bytes are measured at

	bulkN      int // lines of the `agent enqueue -f` file
	bulkRounds int // turns enqueue and the raw bulk baseline take

	scaleNs     []int // pending backlogs of the scale scenario
	stepSamples int   // single steps timed per size
	statusCalls int   // GET /v1/status calls per size

	herdStores   int
	herdPerStore int
	herdJitter   time.Duration
	herdOutage   time.Duration

	compactN int

	intakeN      int // HL7 messages and HTTP requests per round
	asapN        int // dispenses of an ASAP file (and of its enqueue baseline) per round
	intakeConns  int // HL7 connections and HTTP clients
	intakeRounds int

	sinkN int // archive messages through the head-office sink

	centralKeys  int           // retained keys of each central layout
	digestGets   int           // direct gets of each kind of digest check
	partRounds   int           // rounds of the partition comparison
	partRound    time.Duration // length of one variant's turn in a round
	partConns    int           // publishing stores (connections)
	partInFlight int           // single publishes in flight per store
	fillAge      time.Duration // the new layout's movement stream max_age while filled
	cacheSettle  time.Duration // wait after a central restart before reading its memory
}

func fullSizes() sizes {
	return sizes{
		ingestN: 50_000, naiveN: 5_000, ingestConns: 64, ingestRounds: 10,
		syncN: 100_000, syncRounds: 5,
		drainN: 1_000_000, drainRounds: 3, bytesN: 1_000_000,
		bulkN: 1_000_000, bulkRounds: 2,
		scaleNs: []int{10_000, 100_000, 1_000_000}, stepSamples: 201, statusCalls: 100,
		herdStores: 2000, herdPerStore: 3, herdJitter: 5 * time.Second, herdOutage: 3 * time.Second,
		compactN: 1_000_000,
		intakeN:  5_000, asapN: 20_000, intakeConns: 8, intakeRounds: 4,
		sinkN:       1_000_000,
		centralKeys: 1_000_000, digestGets: 2000,
		partRounds: 5, partRound: 6 * time.Second, partConns: 64, partInFlight: 4,
		fillAge: defaultFillAge, cacheSettle: defaultCacheSettle,
	}
}

func quickSizes() sizes {
	return sizes{
		quick:   true,
		ingestN: 10_000, naiveN: 1_000, ingestConns: 64, ingestRounds: 5,
		syncN: 10_000, syncRounds: 3,
		drainN: 20_000, drainRounds: 2, bytesN: 100_000,
		bulkN: 50_000, bulkRounds: 2,
		scaleNs: []int{10_000, 100_000}, stepSamples: 101, statusCalls: 100,
		herdStores: 200, herdPerStore: 5, herdJitter: 5 * time.Second, herdOutage: 2 * time.Second,
		compactN: 100_000,
		intakeN:  1_000, asapN: 5_000, intakeConns: 8, intakeRounds: 2,
		sinkN:       20_000,
		centralKeys: 100_000, digestGets: 2000,
		partRounds: 2, partRound: 4 * time.Second, partConns: 64, partInFlight: 4,
		fillAge: defaultFillAge, cacheSettle: defaultCacheSettle,
	}
}

// bench is one run: its sizes, its temporary directory and its report.
type bench struct {
	size sizes
	root string
	log  io.Writer
	rep  *report
	// now is the time movements are generated for (their occurred_at is
	// an hour before it).
	now time.Time
	// centralMsgBytes is the size of a message of the central fill.
	centralMsgBytes int
	// backlogs caches built backlog files by store and size; scenarios
	// work on copies.
	backlogs map[string]string
}

// dir creates a fresh directory for one part of the run.
func (b *bench) dir(name string) (string, error) {
	d := filepath.Join(b.root, name)
	if err := os.RemoveAll(d); err != nil {
		return "", err
	}
	return d, os.MkdirAll(d, 0o750)
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// run is the command: it parses args, runs the chosen scenarios and writes
// the report.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	quick := fs.Bool("quick", false, "small sizes for a CI smoke run (about a minute or two)")
	jsonFile := fs.String("json", "", "also write the figures as JSON to `FILE`")
	only := fs.String("only", "", "run only these scenarios, comma-separated: "+strings.Join(scenarioNames, ","))
	child := fs.String("ready-child", "", "internal: measure start-up of the agent on this data directory")
	childStore := fs.String("ready-store", "", "internal: the store id of -ready-child")
	childCalls := fs.Int("ready-calls", 100, "internal: status calls of -ready-child")
	withCentral := fs.Bool("central", false, "also run the central scenario (a server process filled with -central-keys movements per layout; minutes)")
	centralKeys := fs.Int("central-keys", 0, "retained keys of each central layout (default 1000000, 100000 with -quick; 10000000 takes long)")
	centralServer := fs.String("central-server", "", "internal: run a central server on this JetStream directory")
	centralNoSync := fs.Bool("central-nosync", false, "internal: the -central-server without sync_interval always")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to `FILE` (go tool pprof)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected arguments: %s", strings.Join(fs.Args(), " "))}
	}
	if *centralServer != "" {
		return centralServerChild(*centralServer, *centralNoSync, os.Stdin, stdout)
	}
	if *child != "" {
		return readyChild(ctx, *child, *childStore, *childCalls, stdout)
	}

	chosen := slices.DeleteFunc(slices.Clone(scenarioNames), func(n string) bool { return n == "central" && !*withCentral })
	if *only != "" {
		chosen = nil
		for _, n := range strings.Split(*only, ",") {
			n = strings.TrimSpace(n)
			if !slices.Contains(scenarioNames, n) {
				return usageError{fmt.Sprintf("-only: unknown scenario %q (known: %s)", n, strings.Join(scenarioNames, ", "))}
			}
			chosen = append(chosen, n)
		}
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	size := fullSizes()
	if *quick {
		size = quickSizes()
	}
	if *centralKeys < 0 || *centralKeys > 0 && *centralKeys < 10*fillBatch {
		return usageError{fmt.Sprintf("-central-keys: %d is not a size (at least %d)", *centralKeys, 10*fillBatch)}
	}
	if *centralKeys > 0 {
		size.centralKeys = *centralKeys
	}
	root, err := os.MkdirTemp("", "rxbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)

	b := &bench{size: size, root: root, log: stderr, rep: newReport(), now: time.Now(), backlogs: make(map[string]string)}
	b.rep.mode = "full"
	if size.quick {
		b.rep.mode = "quick"
	}
	b.rep.scenarios = chosen
	started := time.Now()
	b.logf("bench: %s run of %s in %s", b.rep.mode, strings.Join(chosen, ", "), root)

	scenarios := map[string]func(context.Context, *bench) error{
		"ingest":  benchIngest,
		"sync":    benchSync,
		"drain":   benchDrain,
		"bulk":    benchBulk,
		"scale":   benchScale,
		"herd":    benchHerd,
		"compact": benchCompact,
		"intake":  benchIntake,
		"sink":    benchSink,
		"verify":  benchVerify,
		"central": benchCentral,
		"archive": benchArchive,
		"ledger":  benchLedger,
		"console": benchConsole,
	}
	var failed []string
	for _, name := range scenarioNames {
		if !slices.Contains(chosen, name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		t0 := time.Now()
		b.logf("%s: start", name)
		if err := scenarios[name](ctx, b); err != nil {
			failed = append(failed, name)
			b.rep.note(fmt.Sprintf("scenario %s failed: %v", name, err))
			b.logf("%s: FAILED: %v", name, err)
		}
		b.rep.durations = append(b.rep.durations, scenarioTime{name, time.Since(t0)})
		b.logf("%s: done in %s", name, time.Since(t0).Round(100*time.Millisecond))
	}
	b.rep.runtime = time.Since(started)

	b.rep.writeMarkdown(stdout)
	if *jsonFile != "" {
		data, err := json.MarshalIndent(b.rep.json(), "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonFile, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("scenario(s) failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// environment describes the machine for the report's header.
func environment() string {
	return fmt.Sprintf("%s/%s, %d CPU, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
}
