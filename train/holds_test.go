package train

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/episode"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// Tests of what keeps RL's gains (issue 30): dynamic sampling, skipped
// updates that write nothing they did not measure, the own-state mix,
// the behaviour counts and the selected checkpoint.

// playFixture plays groups of two two-step episodes whose first actions'
// returns are flat (equal) for every group whose draw index is in flat,
// and differ otherwise; it counts the groups played.
type playFixture struct {
	flat  map[int]bool
	drawn int
	calls []int
}

func (p *playFixture) play(n int) ([]*group, []float64, float64, error) {
	p.calls = append(p.calls, n)
	var groups []*group
	var returns []float64
	for range n {
		i := p.drawn
		p.drawn++
		g := &group{State: schemas.RLState{StateID: string(rune('a' + i%26))}}
		for ep := range 2 {
			for step := range 2 {
				g.Samples = append(g.Samples, &sample{Episode: ep, Step: step, Out: Outcome{Action: env.ExecuteScript}})
				r := 0.5
				if !p.flat[i] && ep == 1 {
					r = 1
				}
				returns = append(returns, r-0.1*float64(step))
			}
		}
		groups = append(groups, g)
	}
	return groups, returns, 0.01, nil
}

// TestDynamicSamplingFillsTheBatch: from a fixture where some groups are
// flat, collect draws more groups until the batch holds the groups
// wanted, each with a signal, drops the flat ones and the surplus, and
// stops at oversample x the groups wanted when too few carry a signal.
func TestDynamicSamplingFillsTheBatch(t *testing.T) {
	cfg := DefaultPPOConfig()
	for _, credit := range []string{CreditFirst, CreditAll} {
		cfg.Credit = credit
		t.Run(credit, func(t *testing.T) {
			// Groups 0, 1, 2, 5 flat: 4 wanted need draws 0-7 at least.
			p := &playFixture{flat: map[int]bool{0: true, 1: true, 2: true, 5: true}}
			c, err := collect(cfg, 4, 0, p.play)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.groups) != 4 {
				t.Fatalf("got %d groups, want the 4 wanted", len(c.groups))
			}
			for _, g := range c.groups {
				if flatRewards(firstOf(g)) {
					t.Errorf("group %s is flat but was kept", g.State.StateID)
				}
			}
			if c.rounds < 2 || c.drawn != p.drawn || c.drawn < 8 {
				t.Errorf("rounds %d drawn %d (played %d, calls %v): want at least 2 rounds and 8 draws", c.rounds, c.drawn, p.drawn, p.calls)
			}
			flat := len(c.dropped) - c.surplus
			if flat != 4 || c.surplus != c.drawn-8 {
				t.Errorf("dropped %d flat + %d surplus of %d drawn, want 4 flat and the rest surplus", flat, c.surplus, c.drawn)
			}
			wantRet := 4 * 2 // 4 groups x 2 episodes: one credit per episode
			if len(c.returns) != wantRet {
				t.Errorf("got %d credits, want %d", len(c.returns), wantRet)
			}
			if credit == CreditAll && len(c.trajAdv) != len(flatten(c.groups)) {
				t.Errorf("credit all: %d advantages for %d samples", len(c.trajAdv), len(flatten(c.groups)))
			}
			// Every episode played is in the behaviour counts.
			if c.beh.episodes != 2*c.drawn || c.beh.steps != 4*c.drawn {
				t.Errorf("behaviour counted %d episodes %d steps, want %d and %d", c.beh.episodes, c.beh.steps, 2*c.drawn, 4*c.drawn)
			}
		})
	}
	t.Run("cap", func(t *testing.T) {
		all := map[int]bool{}
		for i := range 100 {
			all[i] = true
		}
		cfg.Credit, cfg.Oversample = CreditFirst, 3
		p := &playFixture{flat: all}
		c, err := collect(cfg, 4, 0, p.play)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.groups) != 0 || c.drawn != 12 || len(c.dropped) != 12 {
			t.Errorf("all flat: kept %d, drew %d, dropped %d; want 0 kept and 3 x 4 = 12 drawn and dropped", len(c.groups), c.drawn, len(c.dropped))
		}
	})
	t.Run("anticipates", func(t *testing.T) {
		// Half the groups flat in recent updates: the first round draws
		// twice the groups wanted, and one round fills the batch.
		cfg.Credit, cfg.Oversample = CreditFirst, 4
		p := &playFixture{flat: map[int]bool{0: true, 2: true, 4: true, 6: true}}
		c, err := collect(cfg, 4, 0.5, p.play)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.calls) != 1 || p.calls[0] != 8 || len(c.groups) != 4 || c.surplus != 0 {
			t.Errorf("draws per round %v, kept %d, surplus %d: want one round of 8 and 4 kept", p.calls, len(c.groups), c.surplus)
		}
	})
	t.Run("off", func(t *testing.T) {
		cfg.Oversample = 1
		p := &playFixture{flat: map[int]bool{0: true}}
		c, err := collect(cfg, 4, 0, p.play)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.groups) != 3 || c.drawn != 4 || c.rounds != 1 {
			t.Errorf("oversample 1: kept %d drew %d in %d rounds, want 3 of 4 in one round", len(c.groups), c.drawn, c.rounds)
		}
	})
}

// firstOf is a group's first actions.
func firstOf(g *group) []*sample {
	var out []*sample
	for _, s := range g.Samples {
		if s.Step == 0 {
			out = append(out, s)
		}
	}
	return out
}

// TestFlatUpdatesWriteNoZeros: a run whose every group is flat (the
// reward is always 0) trains nothing; its updates record skipped and
// how much they drew, and no loss, entropy, KL, reward or outcome share.
func TestFlatUpdatesWriteNoZeros(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	setupPPO(t, root)
	cfg := tinyPPOConfig(root)
	cfg.Updates, cfg.CheckpointEvery, cfg.Oversample = 2, 2, 2
	never := func(context.Context, schemas.RLState, string) (Outcome, error) { return Outcome{DurationS: 0.01}, nil }
	if err := RunPPOWith(ctx, cfg, never, io.Discard); err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, root, cfg.Out)
	if len(ms) != 2 {
		t.Fatalf("got %d metric lines, want 2", len(ms))
	}
	for _, m := range ms {
		if m["skipped"] != true || m["charts/samples"] != 0.0 {
			t.Errorf("update %v: skipped %v samples %v, want skipped with 0 samples", m["step"], m["skipped"], m["charts/samples"])
		}
		for k := range m {
			if strings.HasPrefix(k, "losses/") || strings.HasPrefix(k, "outcomes/") || strings.HasPrefix(k, "actions/") ||
				k == "charts/reward_mean" || k == "charts/valid_action_rate" || k == "charts/duration_mean" {
				t.Errorf("update %v wrote %s = %v though nothing was trained", m["step"], k, m[k])
			}
		}
		// Dynamic sampling drew oversample 2 x the 4 groups wanted (with
		// horizon 1 the groups still in flight from the last update may
		// arrive beside them).
		if d, _ := m["charts/groups_drawn"].(float64); d < 8 {
			t.Errorf("update %v drew %v groups, want at least oversample 2 x 4 = 8", m["step"], m["charts/groups_drawn"])
		}
	}
	// The KL coefficient was not adapted on an unmeasured KL.
	st, _ := store.Open(ctx, root)
	latest, _ := policy.LatestCheckpoint(ctx, st, cfg.Out)
	var saved ppoState
	if _, err := policy.LoadCheckpoint(ctx, st, latest, nil, &saved); err != nil {
		t.Fatal(err)
	}
	if saved.Update != 2 || saved.KLCoef != cfg.KLCoef {
		t.Errorf("saved update %d kl_coef %v, want 2 and %v", saved.Update, saved.KLCoef, cfg.KLCoef)
	}
}

// TestOwnStateMixFollowsTheRatio: with a pool, a share mix of the draws
// are own states; with an empty pool, none.
func TestOwnStateMixFollowsTheRatio(t *testing.T) {
	starts := []schemas.RLState{{StateID: "e0"}, {StateID: "e1"}}
	for _, mix := range []float64{0, 0.25, 0.6} {
		r := &ppoRun{cfg: DefaultPPOConfig(), rng: rand.New(rand.NewPCG(1, 2))}
		r.cfg.OwnStates.Mix = mix
		// An empty pool: every draw is the expert's.
		for range 100 {
			if _, own := r.drawStart(starts); own {
				t.Fatalf("mix %v: drew an own state from an empty pool", mix)
			}
		}
		r.state.Own.Pool = []schemas.RLState{{StateID: "own-a"}, {StateID: "own-b"}}
		const n = 20000
		own := 0
		for range n {
			s, ok := r.drawStart(starts)
			if ok != strings.HasPrefix(s.StateID, "own-") {
				t.Fatalf("drawStart said own %v for %s", ok, s.StateID)
			}
			if ok {
				own++
			}
		}
		// 4.5 standard errors of a binomial share.
		if got, tol := float64(own)/n, 4.5*math.Sqrt(mix*(1-mix)/n)+1e-9; math.Abs(got-mix) > tol {
			t.Errorf("mix %v: %.4f of draws were own states (tolerance %.4f)", mix, got, tol)
		}
		if r.state.Own.Drawn != own {
			t.Errorf("mix %v: counted %d own draws, drew %d", mix, r.state.Own.Drawn, own)
		}
	}
}

// TestOwnPoolRefreshes: the pool is replaced by the pending states every
// refresh updates, not in between.
func TestOwnPoolRefreshes(t *testing.T) {
	r := &ppoRun{cfg: DefaultPPOConfig()}
	r.cfg.OwnStates = OwnStatesConfig{Mix: 0.5, Refresh: 3, PoolSize: 4}
	r.state.Own.Pending = []schemas.RLState{{StateID: "p1"}}
	for u := 1; u <= 2; u++ {
		r.refreshOwn(u)
		if len(r.state.Own.Pool) != 0 {
			t.Fatalf("after update %d: pool %v, want empty until update 3", u, r.state.Own.Pool)
		}
	}
	r.refreshOwn(3)
	if len(r.state.Own.Pool) != 1 || r.state.Own.Pool[0].StateID != "p1" || len(r.state.Own.Pending) != 0 {
		t.Errorf("after update 3: pool %v pending %v, want [p1] and none pending", r.state.Own.Pool, r.state.Own.Pending)
	}
}

// TestSelectBestByTheRule: the earliest best held-in point, if it beats
// update 0 by min_improvement; else update 0 (the SFT policy).
func TestSelectBestByTheRule(t *testing.T) {
	pts := func(ds ...float64) []CurvePoint {
		var out []CurvePoint
		for i, d := range ds {
			out = append(out, CurvePoint{Update: 5 * i, HeldInDelta: d})
		}
		return out
	}
	cases := []struct {
		name   string
		points []CurvePoint
		min    float64
		want   int
	}{
		{"peak then fall", pts(0.10, 0.15, 0.31, 0.20, 0.12), 0.02, 10},
		{"ties take the earliest", pts(0.10, 0.20, 0.20), 0.02, 5},
		{"below the margin: SFT", pts(0.10, 0.11, 0.115), 0.02, 0},
		{"exactly the margin", pts(0.10, 0.12), 0.02, 5},
		{"all worse: SFT", pts(0.10, -0.05, 0.0), 0, 0},
		{"only the SFT point", pts(0.10), 0.02, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sel, ok := SelectBest(tc.points, tc.min)
			if !ok || sel.Update != tc.want {
				t.Errorf("got update %d (ok %v, %s), want %d", sel.Update, ok, sel.Reason, tc.want)
			}
			if sel.Rule != SelectBestHeldIn || sel.MinImprovement != tc.min || sel.SFT == nil || sel.Reason == "" {
				t.Errorf("selection %+v: want the rule, its minimum, the SFT point and a reason", sel)
			}
		})
	}
	if _, ok := SelectBest(pts(0.1)[1:], 0.02); ok {
		t.Error("no update-0 point: want not ok")
	}
}

// TestSelectedCheckpointIsWhatEvaluateReads: selection.json and
// "selected" name the checkpoint of the best held-in point, and
// policy.PickCheckpoint reads it (the latest on request).
func TestSelectedCheckpointIsWhatEvaluateReads(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	setupPPO(t, root)
	cfg := tinyPPOConfig(root)
	cfg.Curve.Every = 1
	st, _ := store.Open(ctx, root)
	s := &stage{name: "train ppo", st: st, log: io.Discard}
	r := &ppoRun{cfg: cfg, s: s}
	vocab := policy.NewVocab([]int{'a'})
	pc := policy.Config{Vocab: vocab.Size(), DModel: 16, Heads: 2, Layers: 1, Ctx: 24, PromptTokens: 16, ResponseTokens: 4}
	r.pol = policy.NewMLERL(pc, vocab, policy.ByteTokenizer{})
	eng, err := policy.NewEngine(policy.EngineNative, pc, policy.InitWeights(pc, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	r.policy = eng
	r.pcg = rand.NewPCG(1, 1)
	for u, d := range []float64{0.10, 0.30, 0.12} {
		r.state.Update = u
		s.record(map[string]any{"stage": "ppo-curve", "step": u, "curve/held-in/delta_r": d})
		if err := r.save(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.selectCheckpoint(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	var sel Selection
	b, err := store.ReadAll(ctx, st, cfg.Out+"/selection.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sel); err != nil {
		t.Fatal(err)
	}
	if sel.Update != 1 || sel.Rule != SelectBestHeldIn || sel.MinImprovement != cfg.Select.MinImprovement || len(sel.Points) != 2 {
		t.Errorf("selection.json %+v: want update 1 by best-held-in with its minimum and 2 PPO points", sel)
	}
	sub, how, err := policy.PickCheckpoint(ctx, st, cfg.Out, policy.CheckpointSelected)
	if err != nil || how != "selected" || !strings.HasSuffix(sub, policy.StepFolder(1)) {
		t.Errorf("selected: got %s (%s, %v), want %s", sub, how, err, policy.StepFolder(1))
	}
	sub, how, err = policy.PickCheckpoint(ctx, st, cfg.Out, policy.CheckpointLast)
	if err != nil || how != "latest" || !strings.HasSuffix(sub, policy.StepFolder(2)) {
		t.Errorf("last: got %s (%s, %v), want %s", sub, how, err, policy.StepFolder(2))
	}
	// The SFT folder selected nothing: the latest.
	if sub, how, _ := policy.PickCheckpoint(ctx, st, "checkpoints/sft", ""); how != "latest" || sub == "" {
		t.Errorf("sft: got %q (%s), want its latest", sub, how)
	}
}

// TestBehaviourCountsAsEvaluation: the shares per update count what
// evaluation's behaviour table counts, and leave out what has no
// denominator.
func TestBehaviourCountsAsEvaluation(t *testing.T) {
	g := &group{}
	add := func(ep int, action string, unchanged bool) {
		g.Samples = append(g.Samples, &sample{Episode: ep, Out: Outcome{Action: action, Unchanged: unchanged}})
	}
	add(0, env.EditScriptSegment, true)
	add(0, env.ExecuteScript, false)
	add(1, env.EditScriptAI, false)
	add(1, env.EditScriptAI, true)
	add(2, env.FinalAnswer, false)
	var b behaviour
	b.add([]*group{g})
	rec := map[string]any{}
	b.record(rec, "behaviour/")
	want := map[string]any{"behaviour/edit_share": 3.0 / 5, "behaviour/unchanged_edit_share": 2.0 / 3, "behaviour/execute_share": 1.0 / 5,
		"behaviour/ran_script_share": 1.0 / 3, "behaviour/final_answer_share": 1.0 / 3, "behaviour/episodes": 3}
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("%s: got %v, want %v", k, rec[k], v)
		}
	}
	empty := map[string]any{}
	(behaviour{}).record(empty, "behaviour/")
	if len(empty) != 0 {
		t.Errorf("no episodes: recorded %v, want nothing", empty)
	}
	// Evaluation's reading of an episode's steps agrees.
	var e behaviour
	e.episode([]schemas.Step{{ActionName: env.EditScriptSegment, Observation: env.UnchangedEditPrefix + " train.py"}, {ActionName: env.ExecuteScript}})
	if e.unchanged != 1 || e.ran != 1 || e.edits != 1 {
		t.Errorf("episode counts %+v: want 1 unchanged edit and the script run", e)
	}
	// Curve episodes' scores, as evaluate's Found and Kept: a better run
	// kept, one lost, one equal to m_init (not better), one never graded;
	// lower is better.
	f := func(x float64) *float64 { return &x }
	var c behaviour
	c.scores(schemas.LowerIsBetter, 10, f(8), f(9))
	c.scores(schemas.LowerIsBetter, 10, f(8), f(10))
	c.scores(schemas.LowerIsBetter, 10, f(10), f(10))
	c.scores(schemas.LowerIsBetter, 10, nil, nil)
	rec = map[string]any{}
	c.record(rec, "curve/held-in/behaviour/")
	if rec["curve/held-in/behaviour/found_better_share"] != 2.0/4 || rec["curve/held-in/behaviour/kept_better_share"] != 1.0/2 {
		t.Errorf("curve scores %+v recorded %v: want found 2 of 4, kept 1 of 2", c, rec)
	}
	if _, ok := empty["behaviour/found_better_share"]; ok {
		t.Errorf("no scored episodes: recorded %v", empty)
	}
}

// TestCurveTasks: curve.max_tasks keeps at most N tasks per split, the
// same ones whatever order the tasks come in, in their original order.
func TestCurveTasks(t *testing.T) {
	var tasks []schemas.Task
	for i := range 12 {
		split := schemas.HeldIn
		if i%3 == 0 {
			split = schemas.HeldOut
		}
		tasks = append(tasks, schemas.Task{TaskID: fmt.Sprintf("t%02d", i), Split: split})
	}
	if got := curveTasks(tasks, 0); len(got) != 12 {
		t.Fatalf("max 0 kept %d of 12", len(got))
	}
	got := curveTasks(tasks, 3)
	n := map[string]int{}
	for _, g := range got {
		n[g.Split]++
	}
	if n[schemas.HeldIn] != 3 || n[schemas.HeldOut] != 3 {
		t.Fatalf("max 3 per split kept %v", n)
	}
	rev := slices.Clone(tasks)
	slices.Reverse(rev)
	again := curveTasks(rev, 3)
	slices.Reverse(again)
	if !slices.EqualFunc(got, again, func(a, b schemas.Task) bool { return a.TaskID == b.TaskID }) {
		t.Errorf("the sample depends on the input order: %v vs %v", got, again)
	}
	if got := curveTasks(tasks, 100); len(got) != 12 {
		t.Errorf("max above the split sizes kept %d of 12", len(got))
	}
}

// TestHeadroomSelection: the share of the headroom closed is bounded per
// task, so one task with a tiny m_init cannot decide the selection as it
// decides mean delta_r; points recorded before it existed are skipped.
func TestHeadroomSelection(t *testing.T) {
	for _, c := range []struct {
		mInit, mBest, final, want float64
		ok                        bool
	}{
		{0.5, 0.9, 0.7, 0.5, true}, // higher is better, half the room
		{10, 4, 7, 0.5, true},      // lower is better: the sign of the room carries it
		{0.12, 0.95, 0.87, 0.9036, true},
		{0.5, 0.9, 2.0, 1, true},  // clipped above
		{10, 4, 1000, -1, true},   // clipped below (a forecast that blew up)
		{0.5, 0.5, 0.7, 0, false}, // no room
	} {
		got, ok := env.HeadroomShare(c.mInit, c.mBest, c.final)
		if ok != c.ok || math.Abs(got-c.want) > 1e-3 {
			t.Errorf("HeadroomShare(%v, %v, %v) = %v, %v; want %v, %v", c.mInit, c.mBest, c.final, got, ok, c.want, c.ok)
		}
	}
	h := func(v float64) *float64 { return &v }
	// Update 10's delta_r is decided by one task (+600%); its headroom is not better.
	points := []CurvePoint{
		{Update: 0, HeldInDelta: 0.10, HeldInHeadroom: h(0.20)},
		{Update: 10, HeldInDelta: 0.80, HeldInHeadroom: h(0.22)},
		{Update: 20, HeldInDelta: 0.30, HeldInHeadroom: h(0.35)},
	}
	if sel, ok := SelectBestBy(points, StatDeltaR, 0.02); !ok || sel.Update != 10 {
		t.Errorf("delta_r: selected %d (%v), want 10", sel.Update, ok)
	}
	sel, ok := SelectBestBy(points, StatHeadroom, 0.02)
	if !ok || sel.Update != 20 || sel.Stat != StatHeadroom || !strings.Contains(sel.Reason, "held-in headroom") {
		t.Errorf("headroom: selected %d (%v): %+v, want 20", sel.Update, ok, sel)
	}
	if _, ok := SelectBestBy([]CurvePoint{{Update: 0, HeldInDelta: 0.1}, {Update: 10, HeldInDelta: 0.2}}, StatHeadroom, 0.02); ok {
		t.Error("headroom selection on points without headroom: want not ok")
	}
	if err := (SelectConfig{Rule: SelectAuto, Stat: "median"}).Validate(DefaultCurveConfig()); err == nil {
		t.Error("stat median: want an error")
	}
}

// TestCurveFollowsTheRunsExecCache: the learning curve's environments take
// the run's execution-cache options (off when the run turns the cache off,
// replaying timeouts when the run asks for it) beside evaluate's defaults.
func TestCurveFollowsTheRunsExecCache(t *testing.T) {
	for _, c := range []struct{ on, timeouts bool }{{false, false}, {true, false}, {true, true}} {
		run := env.DefaultConfig()
		run.ExecCacheOn, run.ExecCacheTimeouts, run.Instrument = c.on, c.timeouts, false
		run.ExecuteAfterUndo = !env.DefaultConfig().ExecuteAfterUndo
		ecfg, stop, err := episode.Setup(context.Background(), curveEnv(run, 3), llm.Config{}, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		stop()
		if ecfg.ExecCacheOn != c.on || ecfg.ExecCacheTimeouts != c.timeouts || (ecfg.ExecCache != nil) != c.on {
			t.Errorf("run's exec_cache %v, exec_cache_timeouts %v: the curve's %v, %v, cache made %v",
				c.on, c.timeouts, ecfg.ExecCacheOn, ecfg.ExecCacheTimeouts, ecfg.ExecCache != nil)
		}
		if ecfg.MaxSteps != 3 || ecfg.Instrument || ecfg.ExecuteAfterUndo != env.DefaultConfig().ExecuteAfterUndo {
			t.Errorf("curve env: max steps %d, instrument %v, execute_after_undo %v: want the curve's limit, the run's instrumentation, evaluate's default",
				ecfg.MaxSteps, ecfg.Instrument, ecfg.ExecuteAfterUndo)
		}
	}
}

// TestCurveFollowsTheRunsLastStepEdits: the learning curve's episodes
// offer edits on their last step as the run does (last_step_edits), and
// never run the script after an edit whatever the run's
// execute_after_edit (evaluation does not), so that their last step
// withholds edits exactly when evaluation's does.
func TestCurveFollowsTheRunsLastStepEdits(t *testing.T) {
	for _, c := range []struct{ keep, afterEdit bool }{{false, false}, {false, true}, {true, false}, {true, true}} {
		run := env.DefaultConfig()
		run.LastStepEdits, run.ExecuteAfterEdit, run.ExecuteAfterUndo = c.keep, c.afterEdit, c.afterEdit
		got := curveEnv(run, 4)
		if got.LastStepEdits != c.keep || got.ExecuteAfterEdit || got.ExecuteAfterUndo {
			t.Errorf("run's last_step_edits %v, execute_after_edit/undo %v: the curve's %v, %v/%v; want %v, false/false",
				c.keep, c.afterEdit, got.LastStepEdits, got.ExecuteAfterEdit, got.ExecuteAfterUndo, c.keep)
		}
	}
}
