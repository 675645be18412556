package env_test

import (
	"context"
	"fmt"
	"log"

	"github.com/mlerl/mlerl/env"
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

// An episode: start it from a tasks row, step it with the agent's
// responses, snapshot it, and restore the snapshot elsewhere.
func Example() {
	ctx := context.Background()
	st, err := store.Open(ctx, "./data")
	if err != nil {
		log.Fatal(err)
	}
	var task schemas.Task // a row of the tasks dataset (internal/datasets)

	python, err := sandbox.FindPython("")
	if err != nil {
		log.Fatal(err)
	}
	runner, err := sandbox.NewWarm(ctx, python) // shared by every env of the process
	if err != nil {
		log.Fatal(err)
	}
	defer runner.Close()
	cfg := env.DefaultConfig()
	cfg.Python, cfg.Runner = python, runner

	e, err := env.New(ctx, cfg, env.SpecFromTask(task), st)
	if err != nil {
		log.Fatal(err)
	}
	defer e.Close()
	for done := false; !done; {
		response := "..." // the agent's answer to the prompt built from e.History()
		r, err := e.Step(ctx, response)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(r.Outcome, r.Reward.Total, r.Observation)
		done = r.Done
	}
	ref, err := e.Snapshot(ctx) // the steps dataset's snapshot_after
	if err != nil {
		log.Fatal(err)
	}
	again, err := env.Restore(ctx, cfg, st, ref) // step-wise RL: one action from this state
	if err != nil {
		log.Fatal(err)
	}
	defer again.Close()
}
