package experiment

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mlerl/mlerl/policy"
)

// A Preset is a named grid: its arms, with their per-arm flags, and what
// it adds to every stage run of the grid. `mlerl experiment --preset
// <name>` picks one; --arms runs a subset of its arms and --extra_arms
// adds more.
type Preset struct {
	Name string
	// Doc is one line saying what the grid asks.
	Doc  string
	Arms []Arm
	// EvalFlags come after the budget's flags of every evaluate run of the
	// grid, the baselines' included (e.g. --splits=held-out,held-in).
	EvalFlags []string
	// CurvePoints > 0 makes every train ppo run of the grid evaluate a
	// learning curve of about that many points after update 0: the
	// budget's curve flags and --curve.every=ceil(updates / CurvePoints),
	// before the grid's ppo_flags (which may override them).
	CurvePoints int
	// TaskCounts maps arms to the number of held-in tasks their training
	// saw, the x axis of the task-count plot (ML-Agent's Fig. 5; SFT's 0:
	// no RL).
	TaskCounts map[string]int
}

// Preset names.
const (
	PresetMain      = "main"
	PresetRL        = "rl"
	PresetAblations = "ablations"
	PresetTaskCount = "taskcount"
)

// Presets lists the built-in grids.
func Presets() []Preset {
	// One actor per held-in task (10), as the paper's actors each serve a
	// competition: a task whose scripts run slowly yields fewer samples.
	// A sample is one action, scored alone (horizon 1), its edit or undo
	// run in the same step (the paper's actions are whole program runs).
	async := []string{"--collector=async", "--advantage=critic", "--group_size=1", "--workers=10",
		"--horizon=1", "--env.execute_after_edit=true", "--env.execute_after_undo=true"}
	free := []string{"--decode=free"}
	return []Preset{
		{Name: PresetMain, Doc: "the baselines, SFT (constrained and free decoding), SFT + step-wise PPO and four ablations of it", Arms: DefaultArms()},
		// The scripted expert is the policy's teacher: does the trained
		// agent beat the trajectories it learned from (issue 49)? It joins
		// the baselines' evaluation, with the same budget and (seed, task)
		// units, so the report pairs SFT + PPO and SFT with it.
		{Name: PresetRL, Doc: "does step-wise RL learn, and does it beat SFT and the scripted expert it learned from on held-in and held-out tasks (issues 21, 49)",
			Arms: []Arm{
				{Name: "initial", Kind: KindBaseline, Method: "initial"},
				{Name: "expert", Kind: KindBaseline, Method: "expert"},
				{Name: "sft", Kind: KindSFT},
				{Name: "sft+ppo", Kind: KindPPO},
			},
			EvalFlags: []string{"--splits=held-out,held-in"}, CurvePoints: 5},
		{Name: PresetAblations, Doc: "the ablations where their phenomena can exist (issue 22)",
			Arms: []Arm{
				{Name: "initial", Kind: KindBaseline, Method: "initial"},
				{Name: "sft", Kind: KindSFT},
				{Name: "sft+ppo", Kind: KindPPO},
				{Name: "episode-wise", Kind: KindPPO, Flags: []string{"--mode=episode"}, AblationOf: "sft+ppo", EqualWall: true,
					Paper: "step-wise RL beats episode-wise RL (ML-Agent); compared at equal wall time"},
				{Name: "async", Kind: KindPPO, Flags: async},
				{Name: "async-no-duration", Kind: KindPPO, Flags: append(slices.Clone(async), "--duration_weighting=false"), AblationOf: "async",
					Phenomenon: PhenomenonDuration, Paper: "duration-aware weighting corrects the asynchronous collector's bias: +3.9% (RL for MLE agents)"},
				{Name: "free", Kind: KindPPO, Flags: free, EvalFlags: free},
				{Name: "free-sparse", Kind: KindPPO, Flags: append(slices.Clone(free), "--env.instrument=false"), EvalFlags: free, AblationOf: "free",
					Phenomenon: PhenomenonInstrumentation, Paper: "partial credit from instrumentation: +22% (RL for MLE agents)"},
			},
			CurvePoints: 10},
		{Name: PresetTaskCount, Doc: "held-out delta_r against the number of held-in tasks RL trains on (ML-Agent's Fig. 5)",
			Arms: []Arm{
				{Name: "sft", Kind: KindSFT},
				{Name: "ppo-5tasks", Kind: KindPPO, Flags: []string{"--state_tasks=5"}},
				{Name: "ppo-10tasks", Kind: KindPPO, Flags: []string{"--state_tasks=10"}},
				{Name: "ppo-20tasks", Kind: KindPPO, Flags: []string{"--state_tasks=20"}},
				{Name: "ppo-40tasks", Kind: KindPPO, Flags: []string{"--state_tasks=40"}},
			},
			// The whole suite has 41 held-in tasks (tasks/README.md); a
			// data root ingested with fewer (--suite demo: 10) cannot run
			// the 20- and 40-task arms, and train ppo says so.
			TaskCounts: map[string]int{"sft": 0, "ppo-5tasks": 5, "ppo-10tasks": 10, "ppo-20tasks": 20, "ppo-40tasks": 40}},
	}
}

// presetNamed returns the built-in preset called name.
func presetNamed(name string) (Preset, bool) {
	for _, p := range Presets() {
		if p.Name == name {
			return p, true
		}
	}
	return Preset{}, false
}

func presetNames() string {
	var names []string
	for _, p := range Presets() {
		names = append(names, p.Name)
	}
	return strings.Join(names, ", ")
}

// ppoArgs are the flags of an arm's train ppo run after its fixed ones:
// the budget's, the preset's learning-curve flags, the grid's ppo_flags,
// then the arm's, each replacing the same flags of the ones before.
func (c Config) ppoArgs(a Arm) []string {
	b := Budgets[c.Budget]
	p, _ := presetNamed(c.Preset)
	var curve []string
	if p.CurvePoints > 0 {
		updates := max(flagInt(slices.Concat(b.PPO, c.PPOFlags, a.Flags), "updates"), 1)
		curve = append(slices.Clone(b.Curve), fmt.Sprintf("--curve.every=%d", max(1, (updates+p.CurvePoints-1)/p.CurvePoints)))
	}
	return overrideFlags(b.PPO, curve, c.PPOFlags, a.Flags)
}

// sftArgs are the flags of every train sft run after its fixed ones: the
// budget's, then the grid's sft_flags.
func (c Config) sftArgs() []string {
	return overrideFlags(Budgets[c.Budget].SFT, c.policyArgs(), c.SFTFlags)
}

// policyArgs are the flags that name the grid's Hugging Face policy (none
// for mlerl's own model): what train sft fine-tunes and the policy arm
// evaluates.
func (c Config) policyArgs() []string {
	if !policy.Pretrained(c.Policy) {
		return nil
	}
	out := []string{"--policy=" + c.Policy}
	if c.Adapter != "" {
		out = append(out, "--adapter="+c.Adapter)
	}
	return out
}

// evalArgs are the flags of every evaluate run after its fixed ones: the
// budget's, the preset's, then the grid's eval_flags (an arm's come
// after, see cell.run).
func (c Config) evalArgs() []string {
	p, _ := presetNamed(c.Preset)
	return overrideFlags(Budgets[c.Budget].Evaluate, p.EvalFlags, c.EvalFlags)
}

// overrideFlags concatenates lists of flags, a flag of a later list
// replacing the same flag in the ones before: the stages' flag parser
// appends the values of a repeated list flag (--splits=held-out
// --splits=held-in is both) instead of keeping the last. A flag is
// --name=value, or --name followed by its value unless the next word is
// a flag (then it is a switch).
func overrideFlags(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		later := map[string]bool{}
		for _, f := range l {
			if name, ok := flagName(f); ok {
				later[name] = true
			}
		}
		kept := out[:0:0]
		for i := 0; i < len(out); i++ {
			name, ok := flagName(out[i])
			if !ok || !later[name] {
				kept = append(kept, out[i])
				continue
			}
			if !strings.Contains(out[i], "=") && i+1 < len(out) && !strings.HasPrefix(out[i+1], "-") {
				i++ // its value
			}
		}
		out = append(kept, l...)
	}
	return out
}

// flagName is the name of a flag word in snake case (--curve.max-steps=4:
// curve.max_steps).
func flagName(f string) (string, bool) {
	if !strings.HasPrefix(f, "-") {
		return "", false
	}
	name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
	return strings.ReplaceAll(name, "-", "_"), name != ""
}

// flagInt is the last integer value of --name (or -name) in flags, as
// --name=V or --name V; 0 when none is there.
func flagInt(flags []string, name string) int {
	v := 0
	for i, f := range flags {
		if n, ok := flagName(f); !ok || n != name {
			continue
		}
		_, val, eq := strings.Cut(f, "=")
		if !eq && i+1 < len(flags) {
			val = flags[i+1]
		}
		if n, err := strconv.Atoi(val); err == nil {
			v = n
		}
	}
	return v
}
