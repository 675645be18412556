package main

import (
	"github.com/spf13/cobra"

	"github.com/mlerl/mlerl/ingest"
)

func init() {
	ingestSubcommands = append(ingestSubcommands, func() *cobra.Command {
		return stageCommand("ideas", "Generate candidate ideas per task and category (catalog or LLM), embed them, keep a diverse k per pool and write the ideas dataset",
			ingest.DefaultIdeasConfig, ingest.RunIdeas)
	})
}
