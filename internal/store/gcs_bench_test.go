package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/schemas"
)

// BenchmarkStepsReadGCS reads 20,000 steps rows (about 2 KB of text each,
// 4 parts) from fake-gcs-server over HTTP with the parquet-go reader, and
// reports the HTTP requests the reads took (the block cache keeps them to
// about one per MiB).
func BenchmarkStepsReadGCS(b *testing.B) {
	ctx := context.Background()
	f := newFaultyGCS(b)
	st := openFast(b, "bench", 3)
	p, err := datasets.Begin(ctx, st, "steps", schemas.Steps, "b")
	if err != nil {
		b.Fatal(err)
	}
	words := strings.Fields("model train valid score metric accuracy loss epoch batch feature import def return print fit predict")
	for part := range 4 {
		rows := make([]schemas.Step, 5000)
		for i := range rows {
			var s strings.Builder
			for j := 0; s.Len() < 2000; j++ {
				s.WriteString(words[(i*7+j*j+part)%len(words)])
				s.WriteString(fmt.Sprint(" ", (i*j)%97, " "))
			}
			rows[i] = schemas.Step{TaskID: "t", TrajectoryID: fmt.Sprint(part), StepIndex: int32(i), State: s.String()}
		}
		if err := datasets.WritePart(ctx, p, fmt.Sprintf("part-%d.parquet", part), rows); err != nil {
			b.Fatal(err)
		}
	}
	m, err := p.Commit(ctx, datasets.CommitOptions{})
	if err != nil {
		b.Fatal(err)
	}
	f.inject(nil, nil)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := 0
		if err := datasets.Each(ctx, st, m, schemas.Steps, func(rows []schemas.Step) error { n += len(rows); return nil }); err != nil {
			b.Fatal(err)
		}
		if n != 20000 {
			b.Fatalf("rows: got %d", n)
		}
	}
	s := b.Elapsed().Seconds() / float64(b.N)
	_, seen := f.counts()
	requests := 0
	for _, n := range seen {
		requests += n
	}
	b.ReportMetric(20000/s, "rows/s")
	b.ReportMetric(float64(m.Bytes)/1e6/s, "fileMB/s")
	b.ReportMetric(float64(requests)/float64(b.N), "requests/op")
	b.ReportMetric(float64(m.Bytes)/1e6, "fileMB")
}
