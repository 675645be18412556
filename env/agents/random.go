package agents

import (
	"context"
	"math/rand/v2"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/internal/llm"
)

// Random is the random valid-action baseline: each step it picks an action
// uniformly and fills its arguments with well-formed, plausible values
// (train.py, a line range, an idea of the plan as edit instruction), so
// every answer parses; whether it helps is chance.
type Random struct{}

// Name implements Factory.
func (Random) Name() string { return "random" }

// Episode implements Factory.
func (Random) Episode(plan []string, seed int64) Agent {
	return &randomAgent{rng: rand.New(rand.NewPCG(uint64(seed), 0xa11)), plan: plan}
}

type randomAgent struct {
	rng  *rand.Rand
	plan []string
}

func (a *randomAgent) Act(ctx context.Context, obs Observation) (string, llm.Usage, error) {
	names := env.ActionNames()
	act := env.Action{Reflection: "-", Thought: "-", Name: names[a.rng.IntN(len(names))]}
	switch act.Name {
	case env.ListFiles:
		act.DirPath = "."
	case env.UnderstandFile:
		act.FileName, act.ThingsToLookFor = "train.py", "the model"
	case env.InspectScriptLines:
		act.ScriptName = "train.py"
		act.StartLine = 1 + a.rng.IntN(40)
		act.EndLine = act.StartLine + a.rng.IntN(40)
	case env.EditScriptSegment:
		act.ScriptName = "train.py"
		act.StartLine = 1 + a.rng.IntN(40)
		act.EndLine = act.StartLine
		act.EditText = "pass"
	case env.EditScriptAI:
		act.ScriptName, act.SaveName = "train.py", "train.py"
		act.EditInstruction = "Improve the model"
		if len(a.plan) > 0 {
			act.EditInstruction = a.plan[a.rng.IntN(len(a.plan))]
		}
	case env.ExecuteScript, env.UndoEditScript:
		act.ScriptName = "train.py"
	case env.CopyFile:
		act.Source, act.Destination = "train.py", "backup.py"
	case env.FinalAnswer:
		act.Answer = "done"
	}
	return env.Render(act), llm.Usage{}, nil
}
