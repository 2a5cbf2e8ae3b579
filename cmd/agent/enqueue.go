package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/internal/progress"
)

// enqueueChunk bounds one request of `agent enqueue`: lines and bytes.
const (
	enqueueChunkLines = 500
	enqueueChunkBytes = 2 << 20
)

// enqueueSummary is what `agent enqueue --json` prints.
type enqueueSummary struct {
	Accepted   int         `json:"accepted"`
	Duplicates int         `json:"duplicates"`
	Rejected   int         `json:"rejected"`
	Rejections []rejection `json:"rejections,omitempty"`
}

type rejection struct {
	Line   int                 `json:"line"`
	Errors []control.ItemError `json:"errors"`
}

// enqueueLong is the help of `agent …`.
const enqueueLong = `Submit movements from a JSON-lines file (one movement object per line), or
from standard input with -f -.

Through the running agent's control socket when it runs, straight into the
data file when it does not. Each line is accepted, recognised as a duplicate
of a movement already held, or rejected with its line number and reasons.
Exit status 1 when any line was rejected.`

func newEnqueueCmd(s *cli.Streams) *cobra.Command {
	var (
		loc     location
		file    string
		storeID string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "enqueue -f FILE.jsonl|-",
		Short: "Submit movements from a JSON-lines file, durably",
		Long:  enqueueLong,
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return cli.UsageError("enqueue: -f FILE is required (use -f - for standard input)")
			}
			var in io.Reader = s.In
			total := 0
			if file != "-" {
				f, err := os.Open(file)
				if err != nil {
					return fmt.Errorf("enqueue: %w", err)
				}
				defer f.Close()
				if fi, err := f.Stat(); err == nil {
					total = int(fi.Size())
				}
				in = f
			}
			dataDir, err := loc.resolveDataDir()
			if err != nil {
				return err
			}
			if storeID == "" {
				if c, _, err := loc.loadConfig(); err == nil {
					storeID = c.StoreID
				}
			}
			conn, err := connect(cmd.Context(), dataDir, readWrite, storeID)
			if err != nil {
				return err
			}
			defer conn.Close()

			var bar *progress.Bar
			if !asJSON {
				bar = progress.New(s.Err, "enqueue", progress.Bytes, total)
			}
			sum, err := enqueueStream(cmd, conn.Client, in, bar)
			bar.Done()
			if err != nil {
				return err
			}
			if err := printEnqueueSummary(s.Out, sum, asJSON); err != nil {
				return err
			}
			if sum.Rejected > 0 {
				return &cli.Error{Code: cli.ExitError, Msg: fmt.Sprintf("%d line(s) rejected; the others were stored", sum.Rejected)}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	loc.register(fs)
	fs.StringVarP(&file, "file", "f", "", "JSON-lines file of movements, or - for standard input")
	fs.StringVar(&storeID, "store-id", "", "store id, needed only when no data file exists yet")
	fs.BoolVar(&asJSON, "json", false, "print the summary as JSON")
	return cmd
}

// printEnqueueSummary prints what enqueue did: as JSON, or each rejected
// line with its fields' errors and a total line.
func printEnqueueSummary(w io.Writer, sum *enqueueSummary, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(sum)
	}
	for _, r := range sum.Rejections {
		var parts []string
		for _, e := range r.Errors {
			if e.Field != "" {
				parts = append(parts, e.Field+": "+e.Error)
			} else {
				parts = append(parts, e.Error)
			}
		}
		fmt.Fprintf(w, "line %d: rejected: %s\n", r.Line, strings.Join(parts, "; "))
	}
	_, err := fmt.Fprintf(w, "accepted %d, duplicates %d, rejected %d\n", sum.Accepted, sum.Duplicates, sum.Rejected)
	return err
}

// enqueueStream sends the input in chunks of whole lines and adds up the
// answers. Line numbers are the input's.
func enqueueStream(cmd *cobra.Command, c *control.Client, in io.Reader, bar *progress.Bar) (*enqueueSummary, error) {
	sum := &enqueueSummary{}
	r := bufio.NewReaderSize(in, 1<<20)
	var chunk bytes.Buffer
	var lineNos []int // input line number of each non-empty line in chunk
	lineNo, chunkBytes := 0, 0
	flush := func() error {
		if len(lineNos) == 0 {
			return nil
		}
		res, err := c.SubmitEach(cmd.Context(), chunk.Bytes())
		if err != nil {
			return fmt.Errorf("enqueue: lines %d-%d: %w (lines before %d were stored)", lineNos[0], lineNos[len(lineNos)-1], err, lineNos[0])
		}
		for _, it := range res {
			switch it.Status {
			case control.StatusAccepted:
				sum.Accepted++
			case control.StatusDuplicate:
				sum.Duplicates++
			default:
				sum.Rejected++
				line := lineNos[it.Item]
				errs := it.Errors
				for i := range errs {
					errs[i].Line, errs[i].Item = line, 0
				}
				sum.Rejections = append(sum.Rejections, rejection{Line: line, Errors: errs})
			}
		}
		bar.Add(chunkBytes)
		chunk.Reset()
		lineNos, chunkBytes = lineNos[:0], 0
		return nil
	}
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			lineNo++
			chunkBytes += len(line)
			if t := bytes.TrimSpace(line); len(t) > 0 {
				chunk.Write(t)
				chunk.WriteByte('\n')
				lineNos = append(lineNos, lineNo)
			}
			if len(lineNos) >= enqueueChunkLines || chunk.Len() >= enqueueChunkBytes {
				if err := flush(); err != nil {
					return sum, err
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return sum, fmt.Errorf("enqueue: reading line %d: %w", lineNo+1, err)
		}
	}
	return sum, flush()
}
