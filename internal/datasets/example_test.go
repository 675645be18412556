package datasets_test

import (
	"context"
	"fmt"
	"os"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// A stage writes a version (resumable by its run key), commits it with its
// producer, and a later stage reads it back.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "mlerl-example-")
	defer os.RemoveAll(dir)
	st := store.NewLocal(dir)

	// Writing: claim (or resume) a version, write parts, commit.
	p, err := datasets.Begin(ctx, st, "tasks", schemas.Tasks, "ingest-2026-11-30")
	if err != nil {
		fmt.Println(err)
		return
	}
	if done, _ := p.HasPart(ctx, "part-00000.parquet"); !done {
		rows := []schemas.Task{{TaskID: "digits", Metric: "accuracy", Direction: schemas.HigherIsBetter, MInit: 0.91}}
		if err := datasets.WritePart(ctx, p, "part-00000.parquet", rows); err != nil {
			fmt.Println(err)
			return
		}
	}
	type config struct {
		Data string `yaml:"data"`
	}
	if _, err := p.Commit(ctx, datasets.CommitOptions{Producer: datasets.NewProducer(config{Data: dir})}); err != nil {
		fmt.Println(err)
		return
	}

	// Reading: the latest committed version, as typed rows.
	m, err := datasets.Latest(ctx, st, "tasks")
	if err != nil {
		fmt.Println(err)
		return
	}
	tasks, err := datasets.ReadAll[schemas.Task](ctx, st, m, schemas.Tasks)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s v%d: %d rows, schema %s\n", m.Name, m.Version, m.Rows, m.Schema)
	fmt.Printf("%s %s %.2f\n", tasks[0].TaskID, tasks[0].Metric, tasks[0].MInit)
	fmt.Println("verify:", datasets.Verify(ctx, st, m))
	// Output:
	// tasks v1: 1 rows, schema tasks
	// digits accuracy 0.91
	// verify: <nil>
}
