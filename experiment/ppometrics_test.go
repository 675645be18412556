package experiment

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/schemas"
)

// metricsFixture is a metrics.jsonl as train ppo writes it: a stage the
// experiment does not know, two learning-curve points (the second
// without held-in tasks), two updates with their samples (update 2
// dropped one), update 2 written twice (the last line wins) and a line
// that does not parse.
const metricsFixture = `{"stage":"ppo-critic-warmup","step":1,"losses/value":0.5}
{"stage":"ppo-curve","step":0,"curve/held-in/delta_r":0.01,"curve/held-out/delta_r":-0.02,"time/wall_s":0,"time/cpu_s":0}
{"stage":"ppo","mode":"step","step":1,"charts/reward_mean":0.1,"charts/valid_action_rate":1,"time/wall_s":10,"time/cpu_s":15,"outcomes/success":0.5,"outcomes/error":0.25,"outcomes/timeout":0.25,"outcomes/oom":0,"outcomes/refused":0,"actions/undo":0.25,"actions/final_answer":0,"samples/duration_s":[1,2,3,4],"samples/reward":[0.5,-1,0,0.3],"samples/class":["success","script_error","timeout","success"],"samples/action":["Execute Script","Execute Script","Execute Script","Undo Edit Script"],"samples/executed":[true,true,true,false],"samples/last_marker":["evaluate","data","model",""],"samples/staleness":[0,1,2,0]}
{"stage":"ppo","mode":"step","step":2,"charts/reward_mean":0.9}
not json
{"stage":"ppo","mode":"step","step":2,"charts/reward_mean":0.2,"charts/valid_action_rate":0.5,"time/wall_s":21,"time/cpu_s":30,"outcomes/oom":0.5,"outcomes/refused":0.5,"actions/final_answer":0.5,"samples/duration_s":[0,5],"samples/reward":[-1,0],"samples/class":["format_error","oom"],"samples/action":["",""],"samples/executed":[false,true],"samples/last_marker":["","training"],"samples/staleness":[0,3],"samples/used":[false,true]}
{"stage":"ppo-curve","step":2,"curve/held-out/delta_r":0.05,"time/wall_s":21,"time/cpu_s":30}
`

func TestParsePPOMetrics(t *testing.T) {
	pm := parsePPOMetrics([]byte(metricsFixture))
	if !reflect.DeepEqual(pm.reward, []float64{0.1, 0.2}) || !reflect.DeepEqual(pm.valid, []float64{1, 0.5}) {
		t.Errorf("reward %v valid %v, want [0.1 0.2] [1 0.5]", pm.reward, pm.valid)
	}
	if len(pm.curve) != 2 || pm.curve[0] != (schemas.CurvePoint{Update: 0, HeldInDeltaR: 0.01, HeldOutDeltaR: -0.02}) ||
		pm.curve[1].Update != 2 || pm.curve[1].WallS != 21 || pm.curve[1].CPUS != 30 || !math.IsNaN(pm.curve[1].HeldInDeltaR) || pm.curve[1].HeldOutDeltaR != 0.05 {
		t.Errorf("curve %+v, want points at updates 0 and 2, held-in NaN at 2", pm.curve)
	}
	wantUpdates := []schemas.UpdateShares{
		{Update: 1, WallS: 10, CPUS: 15, Success: 0.5, Error: 0.25, Corner: 0.25, Undo: 0.25},
		{Update: 2, WallS: 21, CPUS: 30, Corner: 0.5, Refused: 0.5, FinalAnswer: 0.5},
	}
	if !reflect.DeepEqual(pm.updates, wantUpdates) {
		t.Errorf("updates\n got %+v\nwant %+v", pm.updates, wantUpdates)
	}
	wantClasses := []schemas.Count{{Name: "format_error", N: 1}, {Name: "oom", N: 1}, {Name: "script_error", N: 1}, {Name: "success", N: 2}, {Name: "timeout", N: 1}}
	if !reflect.DeepEqual(pm.classes, wantClasses) {
		t.Errorf("classes %v, want %v", pm.classes, wantClasses)
	}
	// Failed runs: script_error (data), timeout (model), oom (training);
	// the format error ran nothing.
	if want := []schemas.Count{{Name: "data", N: 1}, {Name: "model", N: 1}, {Name: "training", N: 1}}; !reflect.DeepEqual(pm.failedMarkers, want) {
		t.Errorf("failed markers %v, want %v", pm.failedMarkers, want)
	}
	wantMoments := []schemas.Moments{
		{Subset: "executed", N: 4, SumX: 11, SumY: -0.5, SumXX: 39, SumYY: 1.25, SumXY: -1.5},
		{Subset: "all", N: 6, SumX: 15, SumY: -1.2, SumXX: 55, SumYY: 2.34, SumXY: -0.3},
	}
	for i, w := range wantMoments {
		g := pm.durationReward[i]
		if g.Subset != w.Subset || g.N != w.N || !near(g.SumX, w.SumX) || !near(g.SumY, w.SumY) || !near(g.SumXX, w.SumXX) || !near(g.SumYY, w.SumYY) || !near(g.SumXY, w.SumXY) {
			t.Errorf("moments %d: got %+v want %+v", i, g, w)
		}
	}
	// Durations 1 2 3 4 0 5: median 2.5; slow 3 4 5 (staleness 2 0 3), fast 1 2 0 (0 1 0).
	if want := []schemas.DurationHalf{{Half: "slow", N: 3, DurationSum: 12, StalenessSum: 5}, {Half: "fast", N: 3, DurationSum: 3, StalenessSum: 1}}; !reflect.DeepEqual(pm.staleness, want) {
		t.Errorf("staleness %+v, want %+v", pm.staleness, want)
	}

	// Duration ranks over all six samples: 0 1 2 3 4 5 -> quarters
	// (4 rank / 6) 1 1 2 3 3 4. Update 1 trains on 1 2 3 4 (Q1 Q2 Q3 Q3,
	// staleness 0 1 2 0); update 2 drops 0 (Q1) and trains on 5 (Q4,
	// staleness 3).
	wantDur := []schemas.UpdateDurations{
		{Update: 1, Trained: 4, Q1: 0.25, Q2: 0.25, Q3: 0.5, Staleness: 0.75},
		{Update: 2, Trained: 1, Dropped: 1, Q4: 1, Staleness: 3},
	}
	if !reflect.DeepEqual(pm.durations, wantDur) {
		t.Errorf("duration quarters\n got %+v\nwant %+v", pm.durations, wantDur)
	}

	// Metrics from before train ppo recorded samples: curves, no summary.
	old := parsePPOMetrics([]byte(`{"stage":"ppo","step":1,"charts/reward_mean":0.3,"charts/valid_action_rate":1}`))
	if len(old.reward) != 1 || old.classes != nil || old.durationReward != nil || old.staleness != nil || old.curve != nil || old.durations != nil {
		t.Errorf("metrics without samples: got %+v", old)
	}
	if empty := parsePPOMetrics([]byte(strings.Repeat("\n", 3))); empty.reward != nil || empty.updates != nil {
		t.Errorf("empty metrics: got %+v", empty)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestPhaseTimes: the wall seconds of each phase are summed over the
// updates (the last line of an update wins; a skipped update, which has
// no reward, still took its time) and the curve points; a phase no line
// recorded is absent, and the report's time table shows it as "-"; the
// scripts' share of the workers' step time joins the execute cell where
// the updates recorded both.
func TestPhaseTimes(t *testing.T) {
	const fixture = `{"stage":"ppo","step":1,"charts/reward_mean":0.1,"time/generate_s":4,"time/execute_s":10,"time/learn_s":2,"time/execute_busy_s":18,"time/execute_script_s":12}
{"stage":"ppo","step":2,"charts/reward_mean":0.3,"time/generate_s":99,"time/execute_s":99,"time/learn_s":99,"time/execute_busy_s":99,"time/execute_script_s":99}
{"stage":"ppo","step":2,"charts/reward_mean":0.2,"time/generate_s":5,"time/execute_s":11,"time/learn_s":3,"time/execute_busy_s":22,"time/execute_script_s":18}
{"stage":"ppo","step":3,"skipped":true,"time/generate_s":6,"time/execute_s":12}
{"stage":"ppo-curve","step":0,"curve/held-in/delta_r":0.1,"time/curve_s":30}
{"stage":"ppo-curve","step":3,"curve/held-in/delta_r":0.2,"time/curve_s":31}
`
	pm := parsePPOMetrics([]byte(fixture))
	want := []schemas.PhaseTime{{Phase: "generate", WallS: 15}, {Phase: "execute", WallS: 33}, {Phase: "learn", WallS: 5}, {Phase: "curve", WallS: 61},
		{Phase: "execute_busy", WallS: 40}, {Phase: "execute_scripts", WallS: 30}}
	if !reflect.DeepEqual(pm.time, want) {
		t.Errorf("phases %+v, want %+v", pm.time, want)
	}
	if !reflect.DeepEqual(pm.reward, []float64{0.1, 0.2}) {
		t.Errorf("reward %v: want the two updates that trained", pm.reward)
	}
	old := parsePPOMetrics([]byte(`{"stage":"ppo","step":1,"charts/reward_mean":0.1,"time/generate_s":4}` + "\n"))
	if !reflect.DeepEqual(old.time, []schemas.PhaseTime{{Phase: "generate", WallS: 4}}) {
		t.Errorf("a run that recorded only generation: %+v", old.time)
	}
	var b strings.Builder
	writeTimeSplit(&b, []*armStats{
		{arm: Arm{Name: "sft+ppo"}, trainWall: 120, trainCPU: 200, evalWall: 60, evalCPU: 90, phases: map[string]float64{"generate": 15, "execute": 33, "learn": 5, "curve": 61,
			"execute_busy": 40, "execute_scripts": 30},
			evalPhases: map[string]float64{"generate": 30, "wait": 30, "execute": 60}},
		{arm: Arm{Name: "async"}, trainWall: 100, trainCPU: 150, phases: map[string]float64{"generate": 10, "execute": 50}},
		{arm: Arm{Name: "sft"}, trainWall: 600, trainCPU: 1100, evalWall: 50, evalCPU: 80},
	})
	for _, row := range []string{"| sft+ppo | 2m0s / 3m20s | 15s (12%) | 33s (28%; scripts 75%) | 5s (4%) | 1m1s (51%) | 1m0s / 1m30s | 30s (25%) | 30s (25%) | 1m0s (50%) |",
		"| async | 1m40s / 2m30s | 10s (10%) | 50s (50%) | - | - |", "| sft | 10m0s / 18m20s | - | - | - | - | 50s / 1m20s | - | - | - |"} {
		if !strings.Contains(b.String(), row) {
			t.Errorf("time table lacks %q:\n%s", row, b.String())
		}
	}
}

// TestEvalPhases: the evaluation's generate, wait and execute seconds are summed
// over the trajectories of the cell's methods only; a phase no trajectory
// recorded (eval_results before 1.2, the initial script's rows) is absent.
func TestEvalPhases(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	results := []schemas.EvalResult{
		{Method: "sft+ppo", GenerateS: f(2), WaitS: f(1), ExecuteS: f(10)},
		{Method: "sft+ppo", GenerateS: f(3), WaitS: f(0), ExecuteS: f(20)},
		{Method: "sft", GenerateS: f(100), ExecuteS: f(100)}, // another cell's method
		{Method: "initial"},
	}
	got := evalPhases(results, map[string]string{"sft+ppo": "sft+ppo", "initial": "initial"})
	want := []schemas.PhaseTime{{Phase: "generate", WallS: 5}, {Phase: "wait", WallS: 1}, {Phase: "execute", WallS: 30}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("phases %+v, want %+v", got, want)
	}
	if got := evalPhases(results[3:], map[string]string{"initial": "initial"}); got != nil {
		t.Errorf("no trajectory recorded a phase: got %+v, want none", got)
	}
}
