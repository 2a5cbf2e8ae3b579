package main

import "github.com/spf13/cobra"

func newRemoteCmd(s *streams) *cobra.Command {
	return &cobra.Command{Use: "remote", Short: "Operate stores over NATS", Hidden: true}
}
