package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

func init() {
	commands = append(commands, lsCommand, inspectCommand, headCommand, verifyCommand)
}

func lsCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls [--json] <root>",
		Short: "List the datasets and committed versions under a data root",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := store.Open(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			ms, err := datasets.List(cmd.Context(), st)
			if err != nil {
				return err
			}
			if asJSON {
				type row struct {
					Name    string `json:"name"`
					Version int    `json:"version"`
					Schema  string `json:"schema"`
					Rows    int64  `json:"rows"`
					Bytes   int64  `json:"bytes"`
					Created string `json:"created_at"`
					URI     string `json:"uri"`
				}
				enc := json.NewEncoder(os.Stdout)
				for _, m := range ms {
					enc.Encode(row{m.Name, m.Version, m.Schema + "/" + m.SchemaVersion, m.Rows, m.Bytes, m.CreatedAt.Format("2006-01-02T15:04:05Z"), m.Ref().URI})
				}
				return nil
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "DATASET\tVERSION\tSCHEMA\tROWS\tSIZE\tCREATED")
			for _, m := range ms {
				fmt.Fprintf(tw, "%s\tv%d\t%s/%s\t%d\t%s\t%s\n", m.Name, m.Version, m.Schema, m.SchemaVersion, m.Rows, humanBytes(m.Bytes), m.CreatedAt.Format("2006-01-02 15:04"))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per version")
	return cmd
}

func inspectCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect [--json] <dataset-uri>",
		Short: "Print a dataset version's manifest (the latest version when the URI has no /vN)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			_, m, err := datasets.Resolve(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(m)
			}
			fmt.Printf("dataset   %s v%d\nuri       %s\nschema    %s %s\nrows      %d in %d files (%s)\ncreated   %s\ncommand   %s\n",
				m.Name, m.Version, m.Ref().URI, m.Schema, m.SchemaVersion, m.Rows, len(m.Files), humanBytes(m.Bytes),
				m.CreatedAt.Format("2006-01-02 15:04:05 MST"), m.Producer.Command)
			if m.Producer.GitRevision != "" {
				fmt.Printf("revision  %s\n", m.Producer.GitRevision)
			}
			for _, p := range m.Parents {
				fmt.Printf("parent    %s (%s v%d)\n", p.URI, p.Name, p.Version)
			}
			for _, f := range m.Files {
				fmt.Printf("file      %s  %d rows  %s  sha256:%s\n", f.Path, f.Rows, humanBytes(f.Bytes), f.SHA256[:16])
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the manifest itself as JSON")
	return cmd
}

func headCommand() *cobra.Command {
	var (
		asJSON bool
		n      int
	)
	cmd := &cobra.Command{
		Use:   "head [--json] [-n N] <dataset-uri>",
		Short: "Print the first rows of a dataset",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, m, err := datasets.Resolve(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printRows(cmd.Context(), st, m, n, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON Lines, one row per line")
	cmd.Flags().IntVarP(&n, "n", "n", 5, "number of rows")
	return cmd
}

var errEnough = errors.New("enough rows")

// printRows prints the first n rows of m in its schema's row type.
func printRows(ctx context.Context, st store.Store, m *datasets.Manifest, n int, asJSON bool) error {
	switch m.Schema {
	case schemas.Tasks.Name:
		return headOf[schemas.Task](ctx, st, m, schemas.Tasks, n, asJSON)
	case schemas.Ideas.Name:
		return headOf[schemas.Idea](ctx, st, m, schemas.Ideas, n, asJSON)
	case schemas.Trajectories.Name:
		return headOf[schemas.Trajectory](ctx, st, m, schemas.Trajectories, n, asJSON)
	case schemas.Steps.Name:
		return headOf[schemas.Step](ctx, st, m, schemas.Steps, n, asJSON)
	case schemas.SFTExamples.Name:
		return headOf[schemas.SFTExample](ctx, st, m, schemas.SFTExamples, n, asJSON)
	case schemas.RLStates.Name:
		return headOf[schemas.RLState](ctx, st, m, schemas.RLStates, n, asJSON)
	case schemas.EvalResults.Name:
		return headOf[schemas.EvalResult](ctx, st, m, schemas.EvalResults, n, asJSON)
	}
	return fmt.Errorf("%s: unknown schema %q: %w", m.URI, m.Schema, schemas.ErrVersion)
}

func headOf[T any](ctx context.Context, st store.Store, m *datasets.Manifest, schema schemas.Info, n int, asJSON bool) error {
	enc := json.NewEncoder(os.Stdout)
	if !asJSON {
		enc.SetIndent("", "  ")
	}
	count := 0
	err := datasets.Each(ctx, st, m, schema, func(rows []T) error {
		for _, r := range rows {
			if count >= n {
				return errEnough
			}
			if err := enc.Encode(r); err != nil {
				return err
			}
			count++
		}
		return nil
	})
	if errors.Is(err, errEnough) {
		return nil
	}
	return err
}

func verifyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "verify <dataset-uri>",
		Short: "Re-check every file of a dataset version against its manifest's checksums",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, m, err := datasets.Resolve(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if err := datasets.Verify(cmd.Context(), st, m); err != nil {
				return err
			}
			fmt.Printf("ok  %s v%d: %d files, %d rows, checksums match\n", m.Name, m.Version, len(m.Files), m.Rows)
			return nil
		},
	}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
