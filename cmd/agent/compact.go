package main

import "github.com/spf13/cobra"

func newCompactCmd(s *streams) *cobra.Command {
	return &cobra.Command{Use: "compact", Short: "Shrink the data file (agent stopped)", Hidden: true}
}
