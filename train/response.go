package train

import (
	"github.com/mlerl/mlerl/env"
)

// TerseResponse rewrites an expert answer as the same action with one-word
// Reflection and Thought and the arguments on one line:
//
//	Reflection: -
//	Thought: -
//	Action: Execute Script
//	Action Input: {"script_name": "train.py"}
//
// A small policy then spends its capacity on choosing the action and its
// arguments rather than on reproducing the expert's prose; the answer
// still parses. An answer that does not parse is returned unchanged.
func TerseResponse(answer string) string {
	a, err := env.Parse(answer)
	if err != nil {
		return answer
	}
	return env.FieldReflection + ": -\n" + env.FieldThought + ": -\n" + env.FieldAction + ": " + a.Name + "\n" + env.FieldActionInput + ": " + a.Input()
}
