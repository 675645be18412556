package experiment

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/schemas"
)

// gridRows makes a grid's rows: 2 seeds x 3 held-out tasks x 2
// trajectories per arm, delta_r = base + the task's offset + a seed term.
func gridRows(base map[string]float64) []schemas.ExperimentRow {
	var rows []schemas.ExperimentRow
	for arm, b := range base {
		for seed := int64(1); seed <= 2; seed++ {
			for ti, task := range []string{"a", "b", "c"} {
				for traj := range int32(2) {
					d := b + 0.01*float64(ti) + 0.002*float64(seed) + 0.001*float64(traj)
					steps, valid := int32(4), int32(4)
					if arm == "initial" {
						d, steps, valid = 0, 0, 0
					}
					if arm == "sft" && task == "c" {
						valid = 3
					}
					rows = append(rows, schemas.ExperimentRow{Arm: arm, Seed: seed, TaskID: task, Split: schemas.HeldOut,
						Direction: schemas.HigherIsBetter, Trajectory: traj, DeltaR: d, Steps: steps, ValidActions: valid,
						TrainWallS: 10, TrainCPUS: 15, EvalWallS: 5, EvalCPUS: 6})
				}
			}
		}
	}
	return rows
}

func TestClaims(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Arms = []string{"initial", "sft", "sft+ppo", "no-duration", "sparse"}
	arms, err := cfg.arms()
	if err != nil {
		t.Fatal(err)
	}
	// SFT clearly above 0; PPO 0.05 above SFT on every unit; no-duration
	// equal to sft+ppo (no difference: interval 0 wide, mean 0); sparse
	// better than sft+ppo (the ablation's claim contradicted).
	s := summarise(cfg, arms, gridRows(map[string]float64{"initial": 0, "sft": 0.1, "sft+ppo": 0.15, "no-duration": 0.15, "sparse": 0.2}))
	got := map[string]string{}
	for _, c := range s.claims() {
		got[c.claim] = c.verdict
	}
	want := map[string]string{
		"SFT improves on the initial script on held-out tasks (delta_r > 0)": reproduces,
		"SFT + step-wise PPO beats SFT on held-out tasks":                    reproduces,
		"sft+ppo beats its ablation no-duration on held-out tasks":           inconclusive,
		"sft+ppo beats its ablation sparse on held-out tasks":                contradicted,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: verdict %q, want %q", k, got[k], v)
		}
	}
	sft := s.arm("sft")
	if sft.heldOut.n != 6 || math.Abs(sft.heldOut.mean-(0.1+0.01+0.003+0.0005)) > 1e-9 {
		t.Errorf("sft held-out: %+v, want 6 units, mean 0.1135", sft.heldOut)
	}
	if math.Abs(sft.valid.mean-(1-1.0/12)) > 1e-9 || sft.trainWall != 10 || sft.trainCPU != 15 {
		t.Errorf("sft valid %+v, train %v/%v", sft.valid, sft.trainWall, sft.trainCPU)
	}
	if s.arm("initial").valid.n != 0 {
		t.Errorf("the initial script takes no steps: its valid rate must be n/a, got %+v", s.arm("initial").valid)
	}

	dir := t.TempDir()
	if err := writeReport(dir, cfg, "mem://experiments/v1", s); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| c | +0.0% | +12.3% (75% valid) |", "**contradicted**", "[sft-s1](cells/sft-s1/report.md)", "delta_r.png"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
}

// TestDurationQuarters: the phenomenon table pools the trained samples'
// duration quarters over updates and seeds (weighted by the samples each
// update trained), and the report draws them per update.
func TestDurationQuarters(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Arms = []string{"sft", "sft+ppo"}
	arms, err := cfg.arms()
	if err != nil {
		t.Fatal(err)
	}
	rows := gridRows(map[string]float64{"sft": 0.1, "sft+ppo": 0.15})
	// Seed 1: update 1 trains 3 samples, all fast; update 2 trains 1,
	// slow, and drops 2. Seed 2: 4 samples, one per quarter. Pooled: Q1
	// (3 + 1) / 8 = 50%, Q4 (1 + 1) / 8 = 25%.
	durs := map[int64][]schemas.UpdateDurations{
		1: {{Update: 1, Trained: 3, Q1: 1}, {Update: 2, Trained: 1, Dropped: 2, Q4: 1, Staleness: 2}},
		2: {{Update: 1, Trained: 4, Q1: 0.25, Q2: 0.25, Q3: 0.25, Q4: 0.25}, {Update: 2, Trained: 0, Dropped: 4, Q1: math.NaN(), Q2: math.NaN(), Q3: math.NaN(), Q4: math.NaN(), Staleness: math.NaN()}},
	}
	for i := range rows {
		if rows[i].Arm == "sft+ppo" {
			rows[i].RewardCurve, rows[i].UpdateDurations = []float64{0, 0.1}, durs[rows[i].Seed]
		}
	}
	s := summarise(cfg, arms, rows)
	if got := quarterShares(s.arm("sft+ppo")); got != "50.0% / 25.0%" {
		t.Errorf("pooled quarters %q, want 50.0%% / 25.0%%", got)
	}
	dir := t.TempDir()
	if err := writeReport(dir, cfg, "mem://experiments/v1", s); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{"| 50.0% / 25.0% |", "(duration_shares.png)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "duration_shares.png")); err != nil {
		t.Error(err)
	}
}
