package provision_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/ledger"
	hoaudit "github.com/rxedge/agent/headoffice/audit"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/testkit/ledgertest"
)

// TestAuditorVerifies runs the verification as the production
// configuration's audit user under each layout: a store publishes its
// movements and checkpoints with its own credentials, and the auditor,
// from its own account and with its grants only, rebuilds the store's
// tree and matches every checkpoint.
func TestAuditorVerifies(t *testing.T) {
	for _, n := range layouts {
		t.Run(fmt.Sprintf("partitions=%d", n), func(t *testing.T) {
			h := startProduction(t, n)
			a := dial(t, h.URL(), storeA)
			au := dial(t, h.URL(), audit)
			ctx := testContext(t)
			s := ledgertest.NewStore(t, "S0001")
			s.Movements(ctx, t, a.js, 7)
			s.Checkpoint(ctx, t, a.js)
			s.Movements(ctx, t, a.js, 5)
			s.Checkpoint(ctx, t, a.js)
			ad := dial(t, h.URL(), admin)
			ledgertest.WaitArchived(ctx, t, ad.js, archive("S0001", n), 14)
			roster, err := provision.ParseRoster(strings.NewReader(s.RosterLine()))
			if err != nil {
				t.Fatal(err)
			}
			// The store answers the signed ledger command on its own
			// connection; the auditor asks it through its grants.
			seed, pub := ledgertest.Operator(t)
			s.Respond(t, a.nc, pub)
			signer, err := command.NewSigner(seed)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := hoaudit.Verify(ctx, hoaudit.Options{Conn: au.nc, APIPrefix: central.AuditAPIPrefix, Archives: central.ArchiveStreams(n),
				Stores: []string{"S0001"}, Roster: roster, Timeout: 5 * time.Second, Asker: fleet.NewClient(au.nc, signer)})
			if err != nil {
				t.Fatalf("verify as the auditor: %v", err)
			}
			if !rep.OK() || len(rep.Logs) != 1 || rep.Logs[0].Matched != 12 || rep.Logs[0].StoreLatest != 12 || rep.Movements != 12 || len(rep.Notes) != 0 {
				t.Fatalf("verify as the auditor: %+v %+v", rep, rep.Logs)
			}
			p, err := hoaudit.Prove(ctx, hoaudit.ProveOptions{Conn: au.nc, APIPrefix: central.AuditAPIPrefix, Archives: central.ArchiveStreams(n),
				Key: ledgertest.Key("S0001", 8), Store: "S0001", Roster: roster, NoWitness: true})
			if err != nil {
				t.Fatalf("prove as the auditor: %v", err)
			}
			if res, err := ledger.CheckProof(p, s.VKey, ""); err != nil || res.Leaf.Seq != 9 {
				t.Fatalf("the auditor's proof: %+v %v", res, err)
			}
		})
	}
}
