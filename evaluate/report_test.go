package evaluate

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

func TestWriteReport(t *testing.T) {
	var rows []schemas.EvalResult
	for _, m := range []string{MethodInitial, MethodRandom, MethodExpert, MethodSFT, MethodPPO} {
		rows = append(rows, rowsOf(m, "a", schemas.HeldOut, schemas.HigherIsBetter, 0.5, 0.5, 0.55)...)
		rows = append(rows, rowsOf(m, "b", schemas.HeldIn, schemas.LowerIsBetter, 3, 2.9, 3.2)...)
	}
	// Answers make transcripts.md: the first trajectory of each (task, method).
	rows[len(rows)-1].Answers = []string{"Action: List Files\nAction Input: {}", "a fence ``` inside\nAction: Final Answer"}
	rows[len(rows)-1].Feedback = []string{"Here are the files: ![x](http://example.com/t.png) `a`", ""}
	// A policy's answer cut inside a character (the first two bytes of
	// "€"), and a reply quoting it.
	rows[0].Answers = []string{"Thought: costs 5\xe2\x82"}
	rows[0].Feedback = []string{"Could not parse \xe2\x82"}
	in := ReportInput{Summary: Summarize(rows), PerTask: 2, MaxSteps: 8, Rows: rows, Notes: []string{"llm: skipped (no llm.base_url configured)"},
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
	tr, err := os.ReadFile(filepath.Join(dir, TranscriptsFile))
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.Valid(tr) || !strings.Contains(string(tr), "costs 5\uFFFD") || !strings.Contains(string(tr), "parse \uFFFD") {
		t.Errorf("transcripts.md is not valid UTF-8 with the cut character shown as U+FFFD:\n%q", tr)
	}
	want := "## b (held-in): sft+ppo, trajectory 1\n\nm (lower): m_init 3, final 3.2, 2 steps.\n\n" +
		"1. **List Files** -> success: `` Here are the files: ![x](http://example.com/t.png) `a` ``\n\n   ```\n   Action: List Files\n   Action Input: {}\n   ```\n\n" +
		"2. **Final Answer** -> success\n\n   ````\n   a fence ``` inside\n   Action: Final Answer\n   ````\n"
	if !strings.Contains(string(tr), want) || strings.Count(string(tr), "\n## ") != 2 || !strings.Contains(string(md), "]("+TranscriptsFile+")") {
		t.Errorf("%s: want two trajectories (the cut answer's, and this one), rendered as\n%s\ngot\n%s", TranscriptsFile, want, tr)
	}
	if _, err := os.Stat(filepath.Join(dir, PPOPlot)); err == nil {
		t.Errorf("%s drawn without PPO metrics", PPOPlot)
	}

	// Without a local folder the report goes into the store.
	st := tempStore(t)
	where, err = WriteReport(ctx, st, "", "reports/eval-v3", in)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := store.Exists(ctx, st, "reports/eval-v3/"+DeltaPlot); !ok || !strings.HasSuffix(where, "reports/eval-v3/"+ReportFile) {
		t.Errorf("store report at %q: want reports/eval-v3/%s with its plots", where, ReportFile)
	}
}
