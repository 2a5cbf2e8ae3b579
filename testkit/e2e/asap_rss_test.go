package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/intake/asap"
	"github.com/rxedge/agent/testkit/agentbin"
)

// asapMaxFile is intake.asap.max_file_bytes's default: the largest file
// the drop folder takes.
const asapMaxFile = 64 << 20

// asapFill is an ASAP 4.2B file of exactly asapMaxFile bytes: a TH, unit
// repeated as often as fits (at most most times), filler (line breaks,
// which the decoder skips between segments) and a TT counting perUnit
// segments a unit, TH and TT.
func asapFill(unit string, perUnit, most int) []byte {
	head := "TH*4.2B*R1*01**20260302*101500*P**~~\n"
	n := min((asapMaxFile-len(head)-64)/len(unit), most)
	tail := fmt.Sprintf("TT*R1*%d~\n", n*perUnit+2)
	b := make([]byte, 0, asapMaxFile)
	b = append(b, head...)
	b = append(b, bytes.Repeat([]byte(unit), n)...)
	b = append(b, bytes.Repeat([]byte{'\n'}, asapMaxFile-len(b)-len(tail))...)
	return append(b, tail...)
}

// asapOrdinary is an ASAP 4.2B file of asapMaxFile bytes as a pharmacy
// writes it: each dispense a PAT, a DSP and a PRE, every one valid.
func asapOrdinary() []byte {
	var b bytes.Buffer
	b.WriteString("TH*4.2B*O1*01**20260302*101500*P**~~\nIS*5550001111*RXEDGE TEST PHARMACY*~\nPHA*1234567893*3312345*BS1234563~\n")
	n := 0
	for {
		rec := fmt.Sprintf("PAT*NY*06*DL%09d****DOE*JANE*Q***1 MAIN STREET**TOWN*NY*10001*5550001111*19700101*F*01~\n"+
			"DSP*00*RXO%09d*20260228*0*20260301*00*01*00406055262*%d*30*01*01*00*1234567890**01*20260301*****30*TAKE 1 TAB*01~\n"+
			"PRE*1987654321*AB1234563**NY*DOCLAST*DOCFIRST**5550001111*XB1234563~\n", n, n, 1+n%120)
		if b.Len()+len(rec)+64 > asapMaxFile {
			break
		}
		b.WriteString(rec)
		n++
	}
	tail := fmt.Sprintf("TP*%d~\nTT*O1*%d~\n", 3*n+2, 3*n+5)
	b.Write(bytes.Repeat([]byte{'\n'}, asapMaxFile-b.Len()-len(tail)))
	b.WriteString(tail)
	return b.Bytes()
}

// TestASAPPeakRSS drops the largest file the folder takes, made of the
// separators a parser pays for (segment terminators, element separators,
// the smallest segments, the smallest dispense records), into the built
// agent's drop folder, each on its own run of the binary, and bounds the
// agent's peak resident memory (VmHWM) by a multiple of the file's size,
// beside an ordinary file of the same size. The figures are logged for the
// record.
func TestASAPPeakRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/<pid>/status")
	}
	if testing.Short() {
		t.Skip("drops 64 MiB files into the built agent")
	}
	cases := []struct {
		name string
		body func() []byte
		to   string // the folder the file ends in
	}{
		{"ordinary", asapOrdinary, "done"},
		{"segment terminators", func() []byte { return asapFill("~", 0, asapMaxFile) }, "done"},
		{"element separators", func() []byte { return asapFill("ZZ"+strings.Repeat("*", asap.MaxElements)+"~", 1, asapMaxFile) }, "done"},
		{"the most segments", func() []byte { return asapFill("ZZ~", 1, asap.MaxSegments-2) }, "done"},
		{"too many segments", func() []byte { return asapFill("ZZ~", 1, asapMaxFile) }, "rejected"},
		{"empty dispense records", func() []byte { return asapFill("DSP"+strings.Repeat("*", 16)+"~", 1, asapMaxFile) }, "rejected"},
	}
	// Over idle, for any file the folder takes: the file is held while it
	// is taken, the collector lets the heap grow to about twice what is
	// live, and an ordinary file's movements add the data file's pages.
	// Before the decoder counted before it split, a file of terminators
	// took 18×, and one of empty dispense records 176×.
	const bound = 5 * asapMaxFile
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			asapDir := filepath.Join(dir, "asap")
			a := asapAgent(t, dir, asapDir)
			idle := peakRSS(t, a.cmd.Process.Pid)
			body := tc.body()
			if len(body) != asapMaxFile {
				t.Fatalf("the file is %d bytes, want %d", len(body), asapMaxFile)
			}
			tmp := filepath.Join(asapDir, "big.asap.tmp")
			if err := os.WriteFile(tmp, body, 0o600); err != nil {
				t.Fatal(err)
			}
			body = nil
			if err := os.Rename(tmp, filepath.Join(asapDir, "big.asap")); err != nil {
				t.Fatal(err)
			}
			waitLong(t, "the file to be taken into "+tc.to+"/", 5*time.Minute, a, func() bool {
				_, err := os.Stat(filepath.Join(asapDir, tc.to, "big.asap"))
				return err == nil
			})
			peak := peakRSS(t, a.cmd.Process.Pid)
			t.Logf("%s: %d MiB file, peak RSS %.1f MiB (idle %.1f MiB), %.2f× the file over idle",
				tc.name, asapMaxFile>>20, float64(peak)/(1<<20), float64(idle)/(1<<20), float64(peak-idle)/asapMaxFile)
			if peak-idle > bound {
				t.Errorf("peak RSS %d bytes over idle, more than %d (%d× the file)", peak-idle, bound, bound/asapMaxFile)
			}
		})
	}
}

// asapAgent starts the built agent with a drop folder and a formulary, and
// no central.
func asapAgent(t *testing.T, dir, asapDir string) *agent {
	t.Helper()
	form := filepath.Join(dir, "formulary.csv")
	os.WriteFile(form, []byte("ndc,schedule\n00406-0552-62,CII\n"), 0o600)
	cfg := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfg, []byte("intake:\n  formulary: "+form+"\n  asap:\n    poll_interval: 100ms\n"), 0o600)
	return startAgent(t, filepath.Join(dir, "data"), agentbin.FreeAddr(t), nil, "--config", cfg, "--asap-dir", asapDir)
}

// waitLong polls cond every 50ms until it holds, failing after limit with
// what was awaited, or at once when the agent exits.
func waitLong(t *testing.T, what string, limit time.Duration, a *agent, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		select {
		case err := <-a.exited:
			a.exited <- err
			t.Fatalf("the agent exited (%v) while waiting for %s\n%s", err, what, a.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s\n%s", limit, what, a.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
