package tokenizer_test

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/catalog"
	"github.com/mlerl/mlerl/internal/tasks"
	"github.com/mlerl/mlerl/policy"
)

// TestWriteSuitePrompts writes the built-in suite's policy prompts, as
// env/agents renders them, to the file $MLERL_WRITE_PROMPTS (gzipped JSON
// lines of name and text): scripts/tokenizer_reference.py puts them in the
// corpus it encodes with Hugging Face's tokenizers. For every task, the
// compact prompt a few steps into an episode (the plan from the task's
// catalog ideas, a history of one of each outcome) and, for every fourth
// task, the full prompt with its tool list; then the action grammar's
// text. Skipped unless the variable is set.
func TestWriteSuitePrompts(t *testing.T) {
	out := os.Getenv("MLERL_WRITE_PROMPTS")
	if out == "" {
		t.Skip("set MLERL_WRITE_PROMPTS=FILE to write the suite's prompts (scripts/tokenizer_reference.py does)")
	}
	suite, bad, err := tasks.LoadSuite(filepath.Join("..", "..", "tasks"))
	if err != nil || len(bad) > 0 {
		t.Fatalf("load the suite: %v %v", err, bad)
	}
	sort.Slice(suite, func(i, j int) bool { return suite[i].ID < suite[j].ID })
	type row struct {
		Name string `json:"name"`
		Text string `json:"text"`
	}
	var rows []row
	for i, task := range suite {
		script, err := os.ReadFile(filepath.Join(task.WorkspacePath(), tasks.ScriptFile))
		if err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(task.WorkspacePath())
		if err != nil {
			t.Fatal(err)
		}
		var files []string
		for _, e := range entries {
			files = append(files, e.Name())
		}
		var plan []string
		for _, idea := range catalog.ForTask(task.Modality, task.TaskType) {
			if len(plan) < 3 {
				plan = append(plan, idea.Text)
			}
		}
		init, cur, best := 0.8125, 0.8431, 0.8570
		if task.Direction == "lower" {
			init, cur, best = 12.5, 11.75, 10.0625
		}
		after := cur
		st := agents.State{
			TaskID: task.ID, Title: task.Title, Description: task.Description, Metric: task.Metric,
			Direction: task.Direction, MInit: init, Current: cur, Best: &best, Plan: plan,
			Script: string(script), Files: files, Modality: task.Modality, TaskType: task.TaskType,
			Step: 3, MaxSteps: 8,
			History: []agents.Step{
				{ActionName: "List Files", ActionText: `{"dir_path": "."}`, Observation: strings.Join(files, "\n"), Outcome: "success"},
				{ActionName: "Edit Script (AI)", ActionText: fmt.Sprintf(`{"script_name": "train.py", "edit_instruction": %q}`, first(plan)), Observation: "edited", Outcome: "success"},
				{ActionName: "Execute Script", ActionText: `{"script_name": "train.py"}`, Observation: "VAL_METRIC 0.8431", Outcome: "ran", MetricAfter: &after, Reward: 0.03},
			},
		}
		rows = append(rows, row{"prompt/compact/" + task.ID, agents.Compact(st, 3000, agents.ApproxCounter)})
		if i%4 == 0 {
			rows = append(rows, row{"prompt/full/" + task.ID, agents.Full(st, 6000, agents.ApproxCounter)})
		}
	}
	rows = append(rows, row{"prompt/grammar", policy.GrammarText()})
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	enc := json.NewEncoder(zw)
	enc.SetEscapeHTML(false)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d prompts to %s", len(rows), out)
}

func first(s []string) string {
	if len(s) == 0 {
		return "Scale the features"
	}
	return s[0]
}
