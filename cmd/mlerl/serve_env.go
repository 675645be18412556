package main

import (
	"github.com/spf13/cobra"

	"github.com/mlerl/mlerl/serve"
)

func init() {
	commands = append(commands, func() *cobra.Command {
		return stageCommand("serve-env", "Serve the environment over HTTP (POST /v1/step: state + action -> reward) for external trainers such as verl", serve.DefaultConfig, serve.Run)
	})
}
