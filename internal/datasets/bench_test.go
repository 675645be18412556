package datasets_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// The benchmark dataset: 100,000 steps rows with about 2 KB of text each
// (state, action, observation), written as 4 parts of 25,000 rows.
const (
	benchRows    = 100_000
	benchPerPart = 25_000
)

var benchWords = strings.Fields(`the model train valid test score metric accuracy loss epoch batch
learning rate feature column data frame pandas numpy sklearn fit predict import def return
for in if else print X_train y_train X_valid y_valid LogisticRegression RandomForest
StandardScaler Pipeline cross validation early stopping regularisation dropout 0.913 0.5 42
Action Edit Script Execute Observation Thought Reflection Research Plan Status Fact Check`)

// benchText returns about n bytes of word salad: text with a vocabulary
// like prompts and code, so zstd compresses it about as much as real
// states.
func benchText(r *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n + 16)
	for b.Len() < n {
		b.WriteString(benchWords[r.IntN(len(benchWords))])
		if r.IntN(12) == 0 {
			b.WriteByte('\n')
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// benchSteps builds the rows and returns their text bytes.
func benchSteps() ([]schemas.Step, int64) {
	r := rand.New(rand.NewPCG(1, 2))
	rows := make([]schemas.Step, benchRows)
	var text int64
	for i := range rows {
		m := 0.5 + r.Float64()/10
		rows[i] = schemas.Step{
			TaskID: fmt.Sprintf("task-%03d", i%50), TrajectoryID: fmt.Sprintf("traj-%06d", i/10), StepIndex: int32(i % 10),
			State: benchText(r, 1500), ActionText: benchText(r, 300), ActionName: "Edit Script", ActionInput: `{"idea":"data-07"}`,
			Observation: benchText(r, 200), Outcome: "improved", MetricBefore: &m, MetricAfter: &m, Markers: []string{"RUN"},
			Reward: 0.1, RewardTerms: []schemas.RewardTerm{{Name: "delta", Value: 0.1}}, ExecS: 2.5, WallS: 3,
			SnapshotRef: "sha256:" + strings.Repeat("ab", 32), SnapshotAfter: "sha256:" + strings.Repeat("cd", 32),
		}
		text += int64(len(rows[i].State) + len(rows[i].ActionText) + len(rows[i].Observation))
	}
	return rows, text
}

func writeBench(b *testing.B, st store.Store, rows []schemas.Step, runKey string) *datasets.Manifest {
	ctx := context.Background()
	p, err := datasets.Begin(ctx, st, "steps", schemas.Steps, runKey)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < len(rows); i += benchPerPart {
		if err := datasets.WritePart(ctx, p, fmt.Sprintf("part-%05d.parquet", i/benchPerPart), rows[i:i+benchPerPart]); err != nil {
			b.Fatal(err)
		}
	}
	m, err := p.Commit(ctx, datasets.CommitOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func report(b *testing.B, rows, text, file int64) {
	s := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(rows)/s, "rows/s")
	b.ReportMetric(float64(text)/1e6/s, "textMB/s")
	b.ReportMetric(float64(file)/1e6/s, "fileMB/s")
	b.ReportMetric(float64(file)/1e6, "fileMB")
}

// BenchmarkStepsWrite writes and commits (checksums included) the dataset
// to the local store with the typed parquet-go writer.
func BenchmarkStepsWrite(b *testing.B) {
	rows, text := benchSteps()
	st := store.NewLocal(b.TempDir())
	b.ResetTimer()
	var m *datasets.Manifest
	for i := 0; i < b.N; i++ {
		m = writeBench(b, st, rows, fmt.Sprint(i))
	}
	report(b, benchRows, text, m.Bytes)
}

// BenchmarkStepsRead reads every row back with the typed parquet-go reader.
func BenchmarkStepsRead(b *testing.B) {
	rows, text := benchSteps()
	st := store.NewLocal(b.TempDir())
	m := writeBench(b, st, rows, "r")
	rows = nil
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var n, got int64
		err := datasets.Each(ctx, st, m, schemas.Steps, func(batch []schemas.Step) error {
			for i := range batch {
				got += int64(len(batch[i].State) + len(batch[i].ActionText) + len(batch[i].Observation))
			}
			n += int64(len(batch))
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if n != benchRows || got != text {
			b.Fatalf("read %d rows, %d text bytes; want %d, %d", n, got, benchRows, text)
		}
	}
	report(b, benchRows, text, m.Bytes)
}

// BenchmarkStepsReadArrow reads every column as Arrow record batches
// (pqarrow), touching the text columns.
func BenchmarkStepsReadArrow(b *testing.B) {
	rows, text := benchSteps()
	st := store.NewLocal(b.TempDir())
	m := writeBench(b, st, rows, "r")
	rows = nil
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var n, got int64
		err := datasets.EachRecord(ctx, st, m, schemas.Steps, nil, func(rec arrow.Record) error {
			for c, f := range rec.Schema().Fields() {
				if f.Name == "state" || f.Name == "action_text" || f.Name == "observation" {
					got += int64(len(rec.Column(c).(*array.String).ValueBytes()))
				}
			}
			n += rec.NumRows()
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if n != benchRows || got != text {
			b.Fatalf("read %d rows, %d text bytes; want %d, %d", n, got, benchRows, text)
		}
	}
	report(b, benchRows, text, m.Bytes)
}
