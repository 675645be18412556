package dataset

// Plan variants: more SFT examples of the one decision the small policy
// cannot learn from a few hundred expert edits, which idea to write into
// Edit Script (AI). The scripted expert edits with the next untried idea
// of its plan, whatever that idea says; a variant of one of its edit
// steps swaps that plan entry for another idea of the same task, in both
// prompts and in the answer, which is what the expert would have written
// with that plan. With only the real steps, the instruction is one of a
// few dozen texts the policy memorises and blends; with variants the
// plan is what predicts it, and what the policy learns of copying
// carries over to held-out plans (SCIENCE.md, run 5: decoding freely,
// about half of its edits, from a handful).
//
// Only the plan entry the edit uses changes: the script, the history and
// the earlier entries (the ideas already tried, whose edits the script
// may carry) stay as they were, so the variant is a state the expert
// could have been in. Variants are SFT examples only: an RL state is
// restored from its snapshot, which a variant does not have.

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/schemas"
)

// VariantCounts says what [PlanVariants] made and skipped, and why.
type VariantCounts struct {
	Edits   int `json:"edits"`    // expert Edit Script (AI) steps read
	Made    int `json:"made"`     // variant steps written
	NotPlan int `json:"not_plan"` // the instruction is not an entry of the step's plan
	NoPool  int `json:"no_pool"`  // the task has no other idea to swap in
}

// variantSep joins a variant's trajectory id to its source's: variant v
// of trajectory T step i is example T~v<v>/i, unique in a steps dataset.
const variantSep = "~v"

// PlanVariants returns up to n variants of every successful Edit Script
// (AI) step of steps (in their order, deterministic for a seed): the
// step with the plan entry its instruction came from replaced by another
// idea of its task, drawn from the ideas the task's plans show in steps.
// A variant's ActionText is the expert's answer re-rendered with the new
// idea (instruction and thought); its prompts differ only in that plan
// line. Steps whose prompts do not show the entry once, in the
// renderer's "N. idea" form, are skipped and counted as not_plan.
func PlanVariants(steps []schemas.Step, n int, seed int64) ([]schemas.Step, VariantCounts) {
	var c VariantCounts
	if n <= 0 {
		return nil, c
	}
	pool := map[string][]string{} // task -> every idea its plans show, first-seen order
	for _, s := range steps {
		for _, idea := range s.Plan {
			if !slices.Contains(pool[s.TaskID], idea) {
				pool[s.TaskID] = append(pool[s.TaskID], idea)
			}
		}
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x706c616e)) // "plan"
	var out []schemas.Step
	for _, s := range steps {
		if s.ActionName != env.EditScriptAI || s.Outcome != outcomeSuccess {
			continue
		}
		c.Edits++
		a, err := env.Parse(s.ActionText)
		k := slices.Index(s.Plan, a.EditInstruction)
		if err != nil || k < 0 {
			c.NotPlan++
			continue
		}
		var others []string
		for _, idea := range pool[s.TaskID] {
			if !slices.Contains(s.Plan, idea) {
				others = append(others, idea)
			}
		}
		if len(others) == 0 {
			c.NoPool++
			continue
		}
		rng.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
		for v, idea := range others[:min(n, len(others))] {
			vs, ok := planVariant(s, a, k, idea)
			if !ok {
				c.NotPlan++
				break
			}
			vs.TrajectoryID = fmt.Sprintf("%s%s%d", s.TrajectoryID, variantSep, v+1)
			out = append(out, vs)
			c.Made++
		}
	}
	return out, c
}

// planVariant is step s (whose parsed answer is a, editing with plan
// entry k) with that entry replaced by idea; ok is false when a prompt
// does not show the entry exactly once.
func planVariant(s schemas.Step, a env.Action, k int, idea string) (schemas.Step, bool) {
	old, repl := fmt.Sprintf("\n%d. %s\n", k+1, s.Plan[k]), fmt.Sprintf("\n%d. %s\n", k+1, idea)
	if strings.Count(s.CompactState, old) != 1 || strings.Count(s.State, old) != 1 {
		return s, false
	}
	v := s
	v.CompactState = strings.Replace(s.CompactState, old, repl, 1)
	v.State = strings.Replace(s.State, old, repl, 1)
	v.Plan = slices.Clone(s.Plan)
	v.Plan[k] = idea
	a.Thought = strings.Replace(a.Thought, agents.LowerFirst(s.Plan[k]), agents.LowerFirst(idea), 1)
	a.EditInstruction = idea
	v.ActionText, v.ActionInput = env.Render(a), a.Input()
	// What followed the real edit (its diff, reward and next state) did
	// not follow this one: a variant is a prompt and an answer only.
	v.Observation, v.Reward, v.RewardTerms, v.SnapshotRef, v.SnapshotAfter = "", 0, nil, "", ""
	return v, true
}

// variantSource is the trajectory a plan variant was made from (ok false
// for an expert trajectory's own id).
func variantSource(trajectoryID string) (string, bool) {
	i := strings.LastIndex(trajectoryID, variantSep)
	if i < 0 {
		return trajectoryID, false
	}
	return trajectoryID[:i], true
}

// weighVariants gives an expert step's example and its plan variants'
// one unit of SFT weight together (each 1/m of m kept), so that variants
// teach which idea to write without making editing more frequent in the
// data than it is in the expert's trajectories. Other examples keep no
// weight (1).
func weighVariants(exs []schemas.SFTExample) {
	type key struct {
		traj string
		step int32
	}
	of := func(e schemas.SFTExample) key {
		src, _ := variantSource(e.TrajectoryID)
		return key{src, e.StepIndex}
	}
	m := map[key]int{}
	for _, e := range exs {
		m[of(e)]++
	}
	for i, e := range exs {
		if n := m[of(e)]; n > 1 {
			w := 1 / float64(n)
			exs[i].Weight = &w
		}
	}
}
