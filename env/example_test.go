package env_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// Parse and Render: the agent's response format.
func ExampleParse() {
	a, err := env.Parse(`Reflection: The baseline runs.
Thought: Inspect the model section.
Action: Inspect Script Lines
Action Input: {"script_name": "train.py", "start_line_number": 10, "end_line_number": 20}`)
	fmt.Println(a.Name, a.ScriptName, a.StartLine, a.EndLine, err)

	_, err = env.Parse("Action: Run\nAction Input: {}")
	fmt.Println(err)

	fmt.Println(env.Render(env.Action{Reflection: "-", Thought: "Run it.", Name: env.ExecuteScript, ScriptName: "train.py"}))
	// Output:
	// Inspect Script Lines train.py 10 20 <nil>
	// format error (missing_field) in "Reflection": no line starts with "Reflection:"; a response has the fields Reflection, Thought, Action, Action Input, each at the start of a line
	// Reflection: -
	// Thought: Run it.
	// Action: Execute Script
	// Action Input: {
	//     "script_name": "train.py"
	// }
}

// An episode on a tiny task: put its trees in a store, step it with an
// agent's responses, snapshot it, and restore the snapshot elsewhere to
// act again from that state (what step-wise RL does).
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "env-example-")
	defer os.RemoveAll(dir)
	st := store.NewLocal(dir)

	// The task: a workspace the agent sees and a private grader with the
	// hidden answers (normally `mlerl ingest tasks` puts them there).
	workspace, _ := blobs.PutTree(ctx, st, blobs.Files{
		"train.py": {Data: []byte("open('submission.csv', 'w').write('id,y\\na,1\\nb,1\\n')\n"), Mode: 0o644},
	}, nil)
	private, _ := blobs.PutTree(ctx, st, blobs.Files{
		"grade.py":    {Data: []byte(exampleGrader), Mode: 0o644},
		"answers.csv": {Data: []byte("id,y\na,1\nb,0\n"), Mode: 0o644},
	}, nil)
	spec := env.Spec{TaskID: "tiny", Title: "Tiny", Description: "Predict y.", Metric: "accuracy",
		Direction: schemas.HigherIsBetter, MInit: 0.25, MBest: 1, TimeLimit: time.Minute,
		WorkspaceTree: workspace, PrivateTree: private}

	// One runner and interpreter for every env of the process (the stages
	// use episode.Setup, which also tries the warm worker).
	python, err := exec.LookPath("python3")
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg := env.DefaultConfig()
	cfg.Python, cfg.Runner, cfg.WorkDir = python, sandbox.NewCold(python), dir
	defer cfg.Runner.Close()

	e, err := env.New(ctx, cfg, spec, st)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	for _, response := range []string{
		env.Render(env.Action{Reflection: "-", Thought: "Look around.", Name: env.ListFiles, DirPath: "."}),
		"Action: Execute Script", // not the answer format: a format error, and a step
		env.Render(env.Action{Reflection: "-", Thought: "Measure the baseline.", Name: env.ExecuteScript, ScriptName: "train.py"}),
		env.Render(env.Action{Reflection: "-", Thought: "Predict 0 for b.", Name: env.EditScriptSegment, ScriptName: "train.py",
			StartLine: 1, EndLine: 1, EditText: "open('submission.csv', 'w').write('id,y\\na,1\\nb,0\\n')"}),
		env.Render(env.Action{Reflection: "-", Thought: "Measure the edit.", Name: env.ExecuteScript, ScriptName: "train.py"}),
	} {
		r, err := e.Step(ctx, response)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("step %d: %s, reward %.2f, score %.2f\n", r.Step, r.Outcome, r.Reward.Total, e.Current())
	}
	ref, err := e.Snapshot(ctx) // a steps row's snapshot_after
	if err != nil {
		fmt.Println(err)
		return
	}
	again, err := env.Restore(ctx, cfg, st, ref)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer again.Close()
	fmt.Printf("restored: step %d, score %.2f\n", again.Steps(), again.Current())
	r, err := again.Step(ctx, env.Render(env.Action{Reflection: "-", Thought: "Done.", Name: env.FinalAnswer, Answer: "edited"}))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("step %d: %s, done %v\n", r.Step, r.Outcome, r.Done)
	// Output:
	// step 1: success, reward 0.00, score 0.25
	// step 2: format_error, reward -1.00, score 0.25
	// step 3: success, reward 0.00, score 0.50
	// step 4: success, reward 0.00, score 0.50
	// step 5: success, reward 0.67, score 1.00
	// restored: step 5, score 1.00
	// step 6: success, done true
}

// exampleGrader scores accuracy against the hidden answers: the grader
// contract is `grade.py <submission.csv> <answers.csv>` printing one JSON
// verdict.
const exampleGrader = `import csv, json, sys
sub = {r["id"]: r["y"] for r in csv.DictReader(open(sys.argv[1]))}
ans = {r["id"]: r["y"] for r in csv.DictReader(open(sys.argv[2]))}
print(json.dumps({"valid": set(sub) == set(ans), "score": sum(sub.get(k) == v for k, v in ans.items()) / len(ans)}))
`
