package train

import (
	"context"
	"testing"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/schemas"
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

func TestFormatRewardUsesTheStrictParser(t *testing.T) {
	valid := env.Render(env.Action{Reflection: "r", Thought: "t", Name: env.ExecuteScript, ScriptName: "train.py"})
	for _, tc := range []struct {
		name   string
		answer string
		want   float64
	}{
		{"valid", valid, 0},
		{"no Action Input", "Reflection: r\nThought: t\nAction: Execute Script\n", -1},
		{"unknown action", "Reflection: r\nThought: t\nAction: Run Everything\nAction Input: {}", -1},
		{"missing argument", "Reflection: r\nThought: t\nAction: Execute Script\nAction Input: {}", -1},
	} {
		got, err := FormatReward(context.Background(), schemas.RLState{}, tc.answer)
		if err != nil || got.Reward != tc.want || got.FormatError != (tc.want < 0) {
			t.Errorf("%s: got reward %v format error %v (%v), want %v", tc.name, got.Reward, got.FormatError, err, tc.want)
		}
	}
}
