package service

import (
	"context"
	"fmt"
	"net"
	"path/filepath"

	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/headoffice/console"
	"github.com/rxedge/agent/headoffice/fleet"
)

// ConsoleJournalFile is the console's journal, in the service's state
// directory.
const ConsoleJournalFile = "console-journal.jsonl"

// console makes the console of the settings' console section over the
// fleet index, the problem book, the sink's tables, verification's
// findings and the prover, and returns its job. Its listener is opened
// here, so that an address in use stops the start.
func (svc *Service) console(signer *command.Signer) (Job, error) {
	s, e := svc.Settings, svc.Env
	o, err := s.Console.Options("console")
	if err != nil {
		return Job{}, err
	}
	if svc.DevAuth {
		o.Auth = console.AuthDev
	}
	j, err := console.OpenFileJournal(filepath.Join(s.StateDir, ConsoleJournalFile))
	if err != nil {
		return Job{}, err
	}
	svc.closers = append(svc.closers, func() { j.Close() })
	o.Index, o.Client, o.Journal = svc.Index, fleet.NewClient(e.Ops, signer), j
	o.Problems = console.BookProblems{Book: svc.Book}
	if e.Pool != nil {
		o.Records = console.SinkRecords{Pool: e.Pool}
		o.Findings = FindingsTable{Pool: e.Pool}
	}
	if e.Roster != nil {
		o.Prover = console.AuditProver{Conn: e.Audit, APIPrefix: e.AuditPrefix, Archives: e.Archives, Roster: e.Roster,
			Witness: e.WitnessKey, NoWitness: e.WitnessKey == nil}
	}
	o.Logger = e.Logger.With("job", JobConsole)
	srv, err := console.New(o)
	if err != nil {
		return Job{}, fmt.Errorf("console: %w", err)
	}
	ln, err := srv.Listen()
	if err != nil {
		return Job{}, err
	}
	svc.Console, svc.consoleLn = srv, ln
	return Job{Name: JobConsole, Run: func(ctx context.Context, p *Pass) error {
		p.Done(ResultOK)
		return srv.Serve(ctx, ln)
	}}, nil
}

// ConsoleAddr is the console's address, once Open made it.
func (svc *Service) ConsoleAddr() string {
	if svc.consoleLn == nil {
		return ""
	}
	return svc.consoleLn.Addr().String()
}

// ConsoleListener is the console's listener, once Open made it.
func (svc *Service) ConsoleListener() net.Listener { return svc.consoleLn }
