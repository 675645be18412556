package experiment

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// TestPresets: every preset is a valid grid with the arms and flags the
// issues ask for, and --help names every preset.
func TestPresets(t *testing.T) {
	f, _ := reflect.TypeFor[Config]().FieldByName("Preset")
	help := f.Tag.Get("help")
	want := map[string][]string{
		PresetMain:      {"initial", "random", "expert", "sft", "sft-free", "sft+ppo", "no-duration", "sparse", "episode-wise", "no-format"},
		PresetRL:        {"initial", "expert", "sft", "sft+ppo"},
		PresetAblations: {"initial", "sft", "sft+ppo", "episode-wise", "async", "async-no-duration", "free", "free-sparse"},
		PresetTaskCount: {"sft", "ppo-5tasks", "ppo-10tasks", "ppo-20tasks", "ppo-40tasks"},
	}
	for _, p := range Presets() {
		cfg := DefaultConfig()
		cfg.Preset = p.Name
		if err := cfg.Validate(); err != nil {
			t.Errorf("preset %s: %v", p.Name, err)
		}
		arms, _ := cfg.arms()
		var names []string
		for _, a := range arms {
			names = append(names, a.Name)
		}
		if !slices.Equal(names, want[p.Name]) {
			t.Errorf("preset %s: arms %v, want %v", p.Name, names, want[p.Name])
		}
		if !strings.Contains(help, p.Name+" (") {
			t.Errorf("the preset key's help does not name %s: %q", p.Name, help)
		}
	}
	if len(Presets()) != len(want) {
		t.Errorf("%d presets, the test knows %d", len(Presets()), len(want))
	}
	if !reflect.DeepEqual(Presets()[0].Arms, DefaultArms()) {
		t.Errorf("main's arms are not DefaultArms")
	}

	arm := func(preset, name string) Arm {
		p, _ := presetNamed(preset)
		for _, a := range p.Arms {
			if a.Name == name {
				return a
			}
		}
		t.Fatalf("preset %s has no arm %s", preset, name)
		return Arm{}
	}
	has := func(flags []string, want ...string) bool {
		for _, w := range want {
			if !slices.Contains(flags, w) {
				return false
			}
		}
		return true
	}
	async := []string{"--collector=async", "--advantage=critic", "--group_size=1", "--workers=10",
		"--horizon=1", "--env.execute_after_edit=true", "--env.execute_after_undo=true"}
	checks := []struct {
		name string
		ok   bool
	}{
		{"rl evaluates held-in tasks too", slices.Contains(presetsByName()[PresetRL].EvalFlags, "--splits=held-out,held-in")},
		{"rl has learning curves", presetsByName()[PresetRL].CurvePoints > 0},
		{"async: the asynchronous collector with the critic, one action per state", has(arm(PresetAblations, "async").Flags, async...) && !has(arm(PresetAblations, "async").Flags, "--duration_weighting=false")},
		{"async-no-duration: the same without duration weighting", has(arm(PresetAblations, "async-no-duration").Flags, append(async, "--duration_weighting=false")...) &&
			arm(PresetAblations, "async-no-duration").AblationOf == "async" && arm(PresetAblations, "async-no-duration").Phenomenon == PhenomenonDuration},
		{"free: decoding freely in training and evaluation", has(arm(PresetAblations, "free").Flags, "--decode=free") && has(arm(PresetAblations, "free").EvalFlags, "--decode=free")},
		{"free-sparse: the same without instrumentation", has(arm(PresetAblations, "free-sparse").Flags, "--decode=free", "--env.instrument=false") &&
			has(arm(PresetAblations, "free-sparse").EvalFlags, "--decode=free") && arm(PresetAblations, "free-sparse").Phenomenon == PhenomenonInstrumentation},
		{"episode-wise at equal wall time, no phenomenon", arm(PresetAblations, "episode-wise").EqualWall && arm(PresetAblations, "episode-wise").Phenomenon == "" &&
			has(arm(PresetAblations, "episode-wise").Flags, "--mode=episode")},
		{"ablations has learning curves", presetsByName()[PresetAblations].CurvePoints > 0},
		{"main's ablations name their phenomena", arm(PresetMain, "no-duration").Phenomenon == PhenomenonDuration &&
			arm(PresetMain, "sparse").Phenomenon == PhenomenonInstrumentation && arm(PresetMain, "no-format").Phenomenon == PhenomenonFormat && arm(PresetMain, "episode-wise").Phenomenon == ""},
		{"taskcount: 5, 10, 20 and 40 tasks", has(arm(PresetTaskCount, "ppo-5tasks").Flags, "--state_tasks=5") && has(arm(PresetTaskCount, "ppo-10tasks").Flags, "--state_tasks=10") &&
			has(arm(PresetTaskCount, "ppo-20tasks").Flags, "--state_tasks=20") && has(arm(PresetTaskCount, "ppo-40tasks").Flags, "--state_tasks=40")},
		{"taskcount: sft is 0 tasks", reflect.DeepEqual(presetsByName()[PresetTaskCount].TaskCounts, map[string]int{"sft": 0, "ppo-5tasks": 5, "ppo-10tasks": 10, "ppo-20tasks": 20, "ppo-40tasks": 40})},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: no", c.name)
		}
	}
}

func presetsByName() map[string]Preset {
	out := map[string]Preset{}
	for _, p := range Presets() {
		out[p.Name] = p
	}
	return out
}

// TestStageArgs: a PPO arm's flags come after the budget's, the preset's
// learning-curve flags (curve.every from the resolved update count) and
// the grid's; every evaluate gets the preset's flags after the budget's.
func TestStageArgs(t *testing.T) {
	cases := []struct {
		name, preset, budget string
		ppoFlags             []string
		arm                  string
		want                 []string // the tail after the budget's PPO flags
	}{
		{"main: no curve", PresetMain, "small", nil, "no-duration", []string{"--duration_weighting=false"}},
		{"rl small: 2 updates, every update", PresetRL, "small", nil, "sft+ppo",
			[]string{"--curve.splits=held-in,held-out", "--curve.per_task=1", "--curve.max_steps=4", "--curve.every=1"}},
		{"rl full: 40 updates in 5 points", PresetRL, "full", nil, "sft+ppo",
			[]string{"--curve.splits=held-in,held-out", "--curve.per_task=2", "--curve.max_steps=8", "--curve.every=8"}},
		{"rl: the grid's updates", PresetRL, "full", []string{"--updates=60", "--curve.per_task=1"}, "sft+ppo",
			[]string{"--curve.splits=held-in,held-out", "--curve.max_steps=8", "--curve.every=12", "--updates=60", "--curve.per_task=1"}},
		{"ablations: updates as two words, 10 points", PresetAblations, "small", []string{"--updates", "200"}, "free",
			[]string{"--curve.splits=held-in,held-out", "--curve.per_task=1", "--curve.max_steps=4", "--curve.every=20", "--updates", "200", "--decode=free"}},
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		cfg.Preset, cfg.Budget, cfg.PPOFlags = c.preset, c.budget, c.ppoFlags
		arms, err := cfg.arms()
		if err != nil {
			t.Fatal(err)
		}
		var a Arm
		for _, x := range arms {
			if x.Name == c.arm {
				a = x
			}
		}
		got := cfg.ppoArgs(a)
		// The budget's flags, less --updates when the grid sets it.
		var b []string
		for _, f := range Budgets[c.budget].PPO {
			if !strings.HasPrefix(f, "--updates=") || flagInt(c.ppoFlags, "updates") == 0 {
				b = append(b, f)
			}
		}
		if !slices.Equal(got, append(b, c.want...)) {
			t.Errorf("%s: got %q, want the budget's then %q", c.name, got, c.want)
		}
	}
	cfg := DefaultConfig()
	cfg.Preset, cfg.EvalFlags = PresetRL, []string{"--per_task=1"}
	// The preset's --splits replaces the budget's (a list flag would
	// take both), the grid's --per_task the budget's.
	want := []string{"--policy_per_task=2", "--env.max_steps=8", "--splits=held-out,held-in", "--per_task=1"}
	if got := cfg.evalArgs(); !slices.Equal(got, want) {
		t.Errorf("rl eval args %q, want %q", got, want)
	}
	// Grids of another preset are other runs: they do not resume each other.
	if runKey(cfg) == runKey(DefaultConfig()) {
		t.Errorf("preset rl and main share a run key")
	}
}

// TestRLGridsStartedBeforeTheExpertArm: the rl preset's expert arm
// (issue 49) makes its grids other runs than before (a rerun of an rl
// grid started by an earlier binary starts a new version, and says so);
// naming the earlier arms resumes the earlier version: its run key is the
// one that binary computed (pinned here for a full-budget grid; small
// grids changed key with their evaluation's step limit anyway).
func TestRLGridsStartedBeforeTheExpertArm(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Preset, cfg.Budget, cfg.Name, cfg.Data, cfg.Seeds = PresetRL, "full", "run15-s51", "/work/data/run14/root", []int{51}
	const before = "experiment-9128075a58ab683f" // this grid's key at 1fb3ad0 (the small budget's changed since: its evaluation's step limit)
	if got := runKey(cfg); got == before {
		t.Errorf("the rl grid with its expert arm has the earlier grid's run key %s: it would resume a version without the expert's rows", got)
	}
	cfg.Arms = earlierRLArms
	if got := runKey(cfg); got != before {
		t.Errorf("--arms %v: run key %s, want the earlier grid's %s", earlierRLArms, got, before)
	}
}

// TestEarlierRLGridHint: a rerun that would start a new version while
// the same grid's earlier version (without the expert arm) is pending
// says so and how to resume it; once a version of its own exists, or
// for other presets or a named arm list, it says nothing.
func TestEarlierRLGridHint(t *testing.T) {
	ctx := context.Background()
	st := store.NewLocal(t.TempDir())
	cfg := DefaultConfig()
	cfg.Preset = PresetRL
	hint := func(cfg Config) string {
		t.Helper()
		h, err := earlierRLGrid(ctx, st, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if h := hint(cfg); h != "" {
		t.Errorf("no earlier grid: got %q", h)
	}
	old := cfg
	old.Arms = earlierRLArms
	if _, err := datasets.Begin(ctx, st, cfg.Out, schemas.Experiments, runKey(old)); err != nil {
		t.Fatal(err)
	}
	if h := hint(cfg); !strings.Contains(h, "/v1 holds this grid as started before") || !strings.Contains(h, "--arms initial,sft,sft+ppo") {
		t.Errorf("an earlier grid pending: got %q", h)
	}
	if h := hint(old); h != "" {
		t.Errorf("resuming it with --arms: got %q", h)
	}
	main := cfg
	main.Preset = PresetMain
	if h := hint(main); h != "" {
		t.Errorf("preset main: got %q", h)
	}
	if _, err := datasets.Begin(ctx, st, cfg.Out, schemas.Experiments, runKey(cfg)); err != nil {
		t.Fatal(err)
	}
	if h := hint(cfg); h != "" {
		t.Errorf("the grid's own version pending: got %q", h)
	}
}

// TestBudgetsLetTheExpertEdit: every budget's evaluation gives the
// scripted expert a step limit it can edit in, and a grid that gives it
// less says in its report why the expert did nothing.
func TestBudgetsLetTheExpertEdit(t *testing.T) {
	for name, b := range Budgets {
		if n := flagInt(b.Evaluate, "env.max_steps"); n < 8 {
			t.Errorf("budget %s: evaluation's env.max_steps %d, want at least 8 (the expert's opening, then an edit cycle of %d steps)", name, n, agents.ScriptedEditSteps)
		}
	}
	cases := []struct {
		name      string
		arms      []string
		evalFlags []string
		want      bool
	}{
		{name: "the small budget", arms: []string{"initial", "expert"}},
		{name: "4 steps", arms: []string{"initial", "expert"}, evalFlags: []string{"--env.max_steps=4"}, want: true},
		{name: "4 steps, no expert", arms: []string{"initial", "random"}, evalFlags: []string{"--env.max_steps=4"}},
		{name: "5 steps", arms: []string{"initial", "expert"}, evalFlags: []string{"--env.max_steps", "5"}},
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		cfg.Arms, cfg.EvalFlags = c.arms, c.evalFlags
		arms, err := cfg.arms()
		if err != nil {
			t.Fatal(err)
		}
		got := expertIdle(cfg, summarise(cfg, arms, nil))
		if (got != "") != c.want || c.want && !strings.Contains(got, "evaluation gives a trajectory 4 steps") {
			t.Errorf("%s: got %q, want a note %v", c.name, got, c.want)
		}
	}
}

func TestFlagInt(t *testing.T) {
	cases := []struct {
		flags []string
		want  int
	}{
		{nil, 0},
		{[]string{"--updates=6"}, 6},
		{[]string{"--updates=6", "--batch_size=8", "--updates", "60"}, 60},
		{[]string{"-updates=3"}, 3},
		{[]string{"--updates_extra=9", "--curve.updates=4"}, 0},
		{[]string{"--updates=x"}, 0},
		{[]string{"--updates"}, 0},
	}
	for _, c := range cases {
		if got := flagInt(c.flags, "updates"); got != c.want {
			t.Errorf("flagInt(%q): got %d want %d", c.flags, got, c.want)
		}
	}
}

func TestOverrideFlags(t *testing.T) {
	cases := []struct {
		name  string
		lists [][]string
		want  []string
	}{
		{"nothing", nil, nil},
		{"no overlap", [][]string{{"--a=1"}, {"--b=2"}}, []string{"--a=1", "--b=2"}},
		{"a list flag replaced", [][]string{{"--splits=held-out", "--per_task=2"}, {"--splits=held-out,held-in"}}, []string{"--per_task=2", "--splits=held-out,held-in"}},
		{"two words replaced, kebab case", [][]string{{"--max_steps", "40", "--x=1"}, {"--max-steps=2"}}, []string{"--x=1", "--max-steps=2"}},
		{"a switch before a flag", [][]string{{"--resume", "--x=1"}, {"--resume=false"}}, []string{"--x=1", "--resume=false"}},
		{"the last of three", [][]string{{"--u=1"}, {"--u=2"}, {"--u", "3"}}, []string{"--u", "3"}},
		{"words that are not flags stay", [][]string{{"evaluate", "--data", "d"}, {"--seed", "1"}}, []string{"evaluate", "--data", "d", "--seed", "1"}},
	}
	for _, c := range cases {
		if got := overrideFlags(c.lists...); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %q want %q", c.name, got, c.want)
		}
	}
}

// TestPolicyGrid: a grid given a Hugging Face policy adds the baseline
// arm policy (the folder evaluated as it is, with its adapter), passes the
// policy to every train sft, and is another run than the same grid of
// mlerl's model, whose run key does not change.
func TestPolicyGrid(t *testing.T) {
	mlerl := DefaultConfig()
	cfg := DefaultConfig()
	cfg.Policy, cfg.Adapter = "hf:/models/qwen", "/adapters/lf"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	arms, err := cfg.arms()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range arms[:4] {
		names = append(names, a.Name)
	}
	if want := []string{"initial", "random", "expert", "policy"}; !slices.Equal(names, want) {
		t.Errorf("the grid's first arms %v, want %v", names, want)
	}
	if got, want := cfg.sftArgs(), append(slices.Clone(Budgets["small"].SFT), "--policy=hf:/models/qwen", "--adapter=/adapters/lf"); !slices.Equal(got, want) {
		t.Errorf("sft args %q, want %q", got, want)
	}
	if got := mlerl.sftArgs(); !slices.Equal(got, Budgets["small"].SFT) {
		t.Errorf("mlerl's grid's sft args %q, want the budget's", got)
	}
	if runKey(cfg) == runKey(mlerl) {
		t.Errorf("a Hugging Face grid shares its run key with mlerl's")
	}
	legacy := mlerl
	legacy.Policy = "" // a config written before the key: the same grid
	if runKey(legacy) != runKey(mlerl) {
		t.Errorf("mlerl's grid changed its run key with the policy key")
	}
	cfg.Arms = []string{"policy", "sft"}
	if err := cfg.Validate(); err != nil {
		t.Errorf("a subset with the policy arm: %v", err)
	}
	mlerl.Arms = []string{"policy"}
	if err := mlerl.Validate(); err == nil || !strings.Contains(err.Error(), `"policy" is not a built-in arm`) {
		t.Errorf("the policy arm without a policy: got %v", err)
	}
	// A GGUF file is a pretrained model like a folder: the prompted arm,
	// and the file fine-tuned by train sft.
	g := DefaultConfig()
	g.Policy = "gguf:/models/smollm2.gguf"
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
	if arms, _ := g.arms(); !slices.ContainsFunc(arms, func(a Arm) bool { return a.Name == "policy" && a.Kind == KindBaseline && a.Method == "policy" }) {
		t.Errorf("a GGUF grid's arms %v lack the prompted arm policy", arms)
	}
	if got := g.sftArgs(); !slices.Contains(got, "--policy=gguf:/models/smollm2.gguf") {
		t.Errorf("a GGUF grid's sft args %q do not name the file", got)
	}
}
