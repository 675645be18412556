package evaluate

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

func TestWriteReport(t *testing.T) {
	var rows []schemas.EvalResult
	for _, m := range []string{MethodInitial, MethodRandom, MethodExpert, MethodSFT, MethodPPO} {
		rows = append(rows, rowsOf(m, "a", schemas.HeldOut, schemas.HigherIsBetter, 0.5, 0.5, 0.55)...)
		rows = append(rows, rowsOf(m, "b", schemas.HeldIn, schemas.LowerIsBetter, 3, 2.9, 3.2)...)
	}
	in := ReportInput{Summary: Summarize(rows), PerTask: 2, MaxSteps: 8, Notes: []string{"llm: skipped (no llm.base_url configured)"},
		Curves: Curves{
			SFT: Curve{Records: ParseMetrics([]byte("{\"stage\":\"sft\",\"step\":1,\"losses/sft\":5.2}\n{\"stage\":\"sft\",\"step\":2,\"losses/sft\":4.1}\nnot json\n{\"step\":2,\"losses/val\":4.5}\n"))},
			// No PPO metrics: the report says so instead of a plot.
		}}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "report")
	where, err := WriteReport(ctx, nil, dir, "", in)
	if err != nil {
		t.Fatal(err)
	}
	if where != filepath.Join(dir, ReportFile) {
		t.Errorf("report at %q, want %q", where, filepath.Join(dir, ReportFile))
	}
	md, err := os.ReadFile(where)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"## held-out tasks", "## held-in tasks", "| sft+ppo | 1 | 2 | +5.00% |", "Note: llm: skipped", "](" + SFTPlot + ")", "PPO: mean reward and losses per update: no metrics found"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("report.md lacks %q:\n%s", s, md)
		}
	}
	for _, p := range []string{DeltaPlot, SFTPlot, TimePlot, ActionsPlot, OutcomesPlot} {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Error(err)
			continue
		}
		if _, err := png.Decode(bytes.NewReader(b)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, PPOPlot)); err == nil {
		t.Errorf("%s drawn without PPO metrics", PPOPlot)
	}

	// Without a local folder the report goes into the store.
	st, err := store.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	where, err = WriteReport(ctx, st, "", "reports/eval-v3", in)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := store.Exists(ctx, st, "reports/eval-v3/"+DeltaPlot); !ok || !strings.HasSuffix(where, "reports/eval-v3/"+ReportFile) {
		t.Errorf("store report at %q: want reports/eval-v3/%s with its plots", where, ReportFile)
	}
}
