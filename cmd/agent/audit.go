package main

import "github.com/spf13/cobra"

func newAuditCmd(s *streams) *cobra.Command {
	return &cobra.Command{Use: "audit", Short: "Show the audit journal", Hidden: true}
}
