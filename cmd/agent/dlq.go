package main

import "github.com/spf13/cobra"

func newDLQCmd(s *streams) *cobra.Command {
	return &cobra.Command{Use: "dlq", Short: "Inspect and act on quarantined movements", Hidden: true}
}
