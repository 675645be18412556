package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"strings"
	"text/tabwriter"

	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"
	"github.com/spf13/cobra"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

func init() {
	commands = append(commands, lsCommand, inspectCommand, headCommand, verifyCommand, versionCommand)
}

func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the git revision this binary was built from (what manifests record)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rev := datasets.Revision()
			if rev == "" {
				rev = "unknown (build with `make build` to stamp the revision)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "mlerl %s\n", rev)
			return nil
		},
	}
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
			if err := rootExists(cmd.Context(), st); err != nil {
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
				enc := json.NewEncoder(cmd.OutOrStdout())
				for _, m := range ms {
					enc.Encode(row{m.Name, m.Version, m.Schema + "/" + m.SchemaVersion, m.Rows, m.Bytes, m.CreatedAt.Format("2006-01-02T15:04:05Z"), m.Ref().URI})
				}
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
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
			st, m, err := datasets.Resolve(cmd.Context(), args[0])
			if err != nil {
				if isParquetPath(args[0]) {
					return fmt.Errorf("%w; `mlerl head %s` prints its rows", err, args[0])
				}
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				// The manifest itself, byte for byte.
				b, err := store.ReadAll(cmd.Context(), st, datasets.Dir(m.Name, m.Version)+"/"+datasets.ManifestFile)
				if err != nil {
					return err
				}
				_, err = out.Write(b)
				if err == nil && (len(b) == 0 || b[len(b)-1] != '\n') {
					_, err = io.WriteString(out, "\n")
				}
				return err
			}
			fmt.Fprintf(out, "dataset   %s v%d\nuri       %s\nschema    %s %s\nrows      %d in %d files (%s)\ncreated   %s\ncommand   %s\n",
				m.Name, m.Version, m.Ref().URI, m.Schema, m.SchemaVersion, m.Rows, len(m.Files), humanBytes(m.Bytes),
				m.CreatedAt.Format("2006-01-02 15:04:05 MST"), m.Producer.Command)
			if m.Producer.GitRevision != "" {
				fmt.Fprintf(out, "revision  %s\n", m.Producer.GitRevision)
			}
			if m.RunKey != "" {
				fmt.Fprintf(out, "run key   %s\n", m.RunKey)
			}
			for _, p := range m.Parents {
				fmt.Fprintf(out, "parent    %s (%s v%d)\n", p.URI, p.Name, p.Version)
			}
			for _, f := range m.Files {
				fmt.Fprintf(out, "file      %s  %d rows  %s  sha256:%.16s\n", f.Path, f.Rows, humanBytes(f.Bytes), f.SHA256)
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
		Use:   "head [--json] [-n N] <dataset-uri | file.parquet>",
		Short: "Print the first rows of a dataset, or of one Parquet file (a part file, an export)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 0 {
				return fmt.Errorf("-n %d: want a count of rows >= 0", n)
			}
			if isParquetPath(args[0]) {
				return headParquetFile(cmd.Context(), cmd.OutOrStdout(), args[0], n, asJSON)
			}
			st, m, err := datasets.Resolve(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printRows(cmd.Context(), cmd.OutOrStdout(), st, m, n, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON Lines, one row per line")
	cmd.Flags().IntVarP(&n, "n", "n", 5, "number of rows")
	return cmd
}

var errEnough = errors.New("enough rows")

// rootExists fails when a data root is not there (a local folder that
// does not exist, a bucket prefix with no folder under it): a mistyped
// path must not list as an empty table.
func rootExists(ctx context.Context, st store.Store) error {
	if l, ok := st.(*store.Local); ok {
		if fi, err := os.Stat(l.Root()); err != nil {
			return fmt.Errorf("%s: no such folder", l.Root())
		} else if !fi.IsDir() {
			return fmt.Errorf("%s is a file, not a data root (a folder of datasets)", l.Root())
		}
		return nil
	}
	dirs, err := store.Dirs(ctx, st, "")
	if err != nil {
		return err
	}
	if len(dirs) == 0 {
		return fmt.Errorf("%s: nothing there (no folder under this prefix)", st.URI(""))
	}
	return nil
}

func isParquetPath(uri string) bool { return strings.HasSuffix(uri, ".parquet") }

// headParquetFile prints the first n rows of one Parquet file, whatever
// its schema, keyed by its column names in column order.
func headParquetFile(ctx context.Context, w io.Writer, uri string, n int, asJSON bool) error {
	dir, base := ".", uri
	if i := strings.LastIndex(uri, "/"); i >= 0 {
		dir, base = uri[:i], uri[i+1:]
		if dir == "" {
			dir = "/"
		}
	}
	st, err := store.Open(ctx, dir)
	if err != nil {
		return err
	}
	o, err := st.Open(ctx, base)
	if err != nil {
		return err
	}
	defer o.Close()
	pr, err := file.NewParquetReader(io.NewSectionReader(o, 0, o.Size()))
	if err != nil {
		return fmt.Errorf("%s: not a readable Parquet file: %v", st.URI(base), err)
	}
	defer pr.Close()
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 256}, memory.DefaultAllocator)
	if err != nil {
		return fmt.Errorf("%s: %v", st.URI(base), err)
	}
	rr, err := fr.GetRecordReader(ctx, nil, nil)
	if err != nil {
		return fmt.Errorf("%s: %v", st.URI(base), err)
	}
	defer rr.Release()
	count := 0
	for count < n && rr.Next() {
		rec := rr.Record()
		for i := 0; i < int(rec.NumRows()) && count < n; i++ {
			var buf bytes.Buffer
			buf.WriteByte('{')
			for j := range int(rec.NumCols()) {
				if j > 0 {
					buf.WriteByte(',')
				}
				k, _ := json.Marshal(rec.ColumnName(j))
				v, err := json.Marshal(rec.Column(j).GetOneForMarshal(i))
				if err != nil {
					return fmt.Errorf("%s: column %s row %d: %v", st.URI(base), rec.ColumnName(j), count, err)
				}
				buf.Write(k)
				buf.WriteByte(':')
				buf.Write(v)
			}
			buf.WriteByte('}')
			b := buf.Bytes()
			if !asJSON {
				var ind bytes.Buffer
				json.Indent(&ind, b, "", "  ")
				b = ind.Bytes()
			}
			if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
				return err
			}
			count++
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: %v", st.URI(base), err)
	}
	return nil
}

// headers print the first n rows of a dataset in its schema's row type,
// one per schema (a test checks that every schema has one).
var headers = map[string]func(ctx context.Context, w io.Writer, st store.Store, m *datasets.Manifest, n int, asJSON bool) error{
	schemas.Tasks.Name:        headFunc[schemas.Task](schemas.Tasks),
	schemas.Ideas.Name:        headFunc[schemas.Idea](schemas.Ideas),
	schemas.Trajectories.Name: headFunc[schemas.Trajectory](schemas.Trajectories),
	schemas.Steps.Name:        headFunc[schemas.Step](schemas.Steps),
	schemas.SFTExamples.Name:  headFunc[schemas.SFTExample](schemas.SFTExamples),
	schemas.RLStates.Name:     headFunc[schemas.RLState](schemas.RLStates),
	schemas.EvalResults.Name:  headFunc[schemas.EvalResult](schemas.EvalResults),
	schemas.Experiments.Name:  headFunc[schemas.ExperimentRow](schemas.Experiments),
}

func headFunc[T any](info schemas.Info) func(context.Context, io.Writer, store.Store, *datasets.Manifest, int, bool) error {
	return func(ctx context.Context, w io.Writer, st store.Store, m *datasets.Manifest, n int, asJSON bool) error {
		return headOf[T](ctx, w, st, m, info, n, asJSON)
	}
}

// printRows prints the first n rows of m in its schema's row type.
func printRows(ctx context.Context, w io.Writer, st store.Store, m *datasets.Manifest, n int, asJSON bool) error {
	if h, ok := headers[m.Schema]; ok {
		return h(ctx, w, st, m, n, asJSON)
	}
	return fmt.Errorf("%s: unknown schema %q: %w", m.URI, m.Schema, schemas.ErrVersion)
}

// headOf prints rows with their Parquet column names as keys, in column
// order: one compact JSON object per line with asJSON, indented otherwise.
func headOf[T any](ctx context.Context, w io.Writer, st store.Store, m *datasets.Manifest, schema schemas.Info, n int, asJSON bool) error {
	if n == 0 {
		return nil
	}
	count := 0
	err := datasets.Each(ctx, st, m, schema, func(rows []T) error {
		for _, r := range rows {
			if count >= n {
				return errEnough
			}
			b, err := rowJSON(reflect.ValueOf(r))
			if err != nil {
				return err
			}
			if !asJSON {
				var buf bytes.Buffer
				json.Indent(&buf, b, "", "  ")
				b = buf.Bytes()
			}
			if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
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

// rowJSON renders a row struct as a JSON object keyed by Parquet column
// names, in field order (nested structs too).
func rowJSON(v reflect.Value) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	t := v.Type()
	for i := range t.NumField() {
		if i > 0 {
			buf.WriteByte(',')
		}
		name := strings.Split(t.Field(i).Tag.Get("parquet"), ",")[0]
		k, _ := json.Marshal(name)
		buf.Write(k)
		buf.WriteByte(':')
		if err := valueJSON(&buf, v.Field(i)); err != nil {
			return nil, err
		}
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

func valueJSON(buf *bytes.Buffer, v reflect.Value) error {
	switch {
	case v.Kind() == reflect.Struct:
		b, err := rowJSON(v)
		buf.Write(b)
		return err
	case v.Kind() == reflect.Slice && (v.Type().Elem().Kind() == reflect.Struct || v.Type().Elem().Kind() == reflect.Float64):
		// Element by element: structs keep Parquet column names, floats
		// may be NaN (null below).
		buf.WriteByte('[')
		for i := range v.Len() {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := valueJSON(buf, v.Index(i)); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
		return nil
	case v.Kind() == reflect.Slice && v.IsNil():
		buf.WriteString("[]")
		return nil
	case v.Kind() == reflect.Pointer && !v.IsNil():
		return valueJSON(buf, v.Elem())
	case v.Kind() == reflect.Float64 || v.Kind() == reflect.Float32:
		// JSON has no NaN or infinity: a value that was not measured (a
		// correlation over too few samples) prints as null.
		if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
			buf.WriteString("null")
			return nil
		}
	}
	b, err := json.Marshal(v.Interface())
	buf.Write(b)
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
			fmt.Fprintf(cmd.OutOrStdout(), "ok  %s v%d: %d files, %d rows, checksums match\n", m.Name, m.Version, len(m.Files), m.Rows)
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
