package main

import (
	"github.com/spf13/cobra"

	"github.com/rxedge/agent/internal/cli"
)

// rootLong is the help of hq.
const rootLong = `RxEdge head office (packaged as rxedge-hq).

The store's agent (rxedge-agent) delivers each movement once to central,
a NATS JetStream cluster. Head office runs this binary against central
and the stores: it provisions central and writes its server
configuration, copies the archives into PostgreSQL, countersigns and
verifies the stores' signed logs, reconciles the archive with what the
stores acknowledged, and operates the stores over NATS. It never opens a
store's data file.`

func newRoot(s *cli.Streams) *cobra.Command {
	root := &cobra.Command{
		Use:   "hq",
		Short: "RxEdge head office: central's streams and configuration, the archive in PostgreSQL, verification, the fleet",
		Long:  rootLong,
	}
	root.AddCommand(
		newProvisionCmd(s),
		newCentralConfigCmd(s),
		newHubCmd(s),
		newDurabilityCmd(s),
		newMigrateCmd(s),
		newRunCmd(s),
		newDoctorCmd(s),
		newSinkCmd(s),
		newReportCmd(s),
		newReconcileCmd(s),
		newVerifyCmd(s),
		newProveCmd(s),
		newVerifyProofCmd(s),
		newWitnessCmd(s),
		newWitnessKeyCmd(s),
		newRemoteCmd(s),
		newKeysCmd(s),
		cli.Version(s),
	)
	return cli.Root(root)
}
