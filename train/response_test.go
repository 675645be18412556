package train

import (
	"testing"

	"github.com/mlerl/mlerl/rollout/env"
)

func TestTerseResponseKeepsTheAction(t *testing.T) {
	for _, a := range []env.Action{
		{Reflection: "The score improved from 0.81 to 0.86.", Thought: "Next idea.", Name: env.EditScriptAI, ScriptName: "train.py", EditInstruction: "Standardise the features", SaveName: "train.py"},
		{Reflection: "x", Thought: "y", Name: env.InspectScriptLines, ScriptName: "train.py", StartLine: 1, EndLine: 40},
		{Reflection: "x", Thought: "y", Name: env.FinalAnswer, Answer: "Final score 0.9 \"quoted\"\nline"},
	} {
		got := TerseResponse(env.Render(a))
		b, err := env.Parse(got)
		if err != nil {
			t.Fatalf("terse answer does not parse: %v\n%s", err, got)
		}
		a.Reflection, a.Thought = "-", "-"
		if b != a {
			t.Errorf("got %+v, want %+v", b, a)
		}
		if len(got) >= len(env.Render(a)) {
			t.Errorf("terse answer is not shorter:\n%s", got)
		}
	}
	if got := TerseResponse("not an answer"); got != "not an answer" {
		t.Errorf("unparseable answer: got %q, want it unchanged", got)
	}
}
