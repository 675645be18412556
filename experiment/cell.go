package experiment

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// A cell is what one seed of one arm (or of every baseline arm at once)
// costs: its training, then its evaluation, each a process of the mlerl
// binary, exactly as a user runs the stages.
type cell struct {
	kind string // KindBaseline (every baseline arm), KindSFT or KindPPO
	seed int
	arms []Arm
}

// plan lists the cells seed by seed: the baselines, the SFT policy (whose
// checkpoint every PPO arm of the seed starts from), then each PPO arm.
func plan(cfg Config, arms []Arm) []cell {
	var out []cell
	for _, seed := range cfg.Seeds {
		var base []Arm
		for _, a := range arms {
			if a.Kind == KindBaseline {
				base = append(base, a)
			}
		}
		if len(base) > 0 {
			out = append(out, cell{kind: KindBaseline, seed: seed, arms: base})
		}
		for _, a := range arms {
			if a.Kind != KindBaseline {
				out = append(out, cell{kind: a.Kind, seed: seed, arms: []Arm{a}})
			}
		}
	}
	return out
}

func (c cell) name() string {
	if c.kind == KindBaseline {
		return fmt.Sprintf("baselines-s%d", c.seed)
	}
	return fmt.Sprintf("%s-s%d", c.arms[0].Name, c.seed)
}

func (c cell) part() string { return "cell-" + c.name() + ".parquet" }

// usage is what a cell's processes took.
type usage struct{ wallS, cpuS float64 }

func (u *usage) add(v usage) { u.wallS, u.cpuS = u.wallS+v.wallS, u.cpuS+v.cpuS }

// stage runs `bin args...` with its output in logs/<cell>-<what>.log, and
// measures its wall time and CPU time (user and system, the processes it
// waited for included: its sandboxed scripts and grader runs), summed
// over the stage's legs in the grid's pending version key (its ledger,
// usage.go): a resumed stage appends to its log and adds to its usage. A
// signal to the experiment reaches the stage as SIGTERM, which saves its
// state.
func stage(ctx context.Context, cfg Config, logDir, key, name string, args ...string) (usage, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return usage{}, err
	}
	path, ledgerPath := filepath.Join(logDir, name+".log"), filepath.Join(logDir, name+".usage.json")
	led, fresh, killed, lerr := readLedger(ledgerPath, key)
	flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND
	if fresh {
		flags |= os.O_TRUNC // a new version of the grid: its own log
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return usage{}, err
	}
	defer f.Close()
	if lerr != nil {
		fmt.Fprintf(f, "# experiment: %v\n", lerr)
	}
	if led.Legs > 0 {
		how := ""
		if killed {
			how = "; the last one was killed, counted to its last record"
		}
		fmt.Fprintf(f, "\n# leg %d, resumed %s (earlier legs: %.0f s wall, %.0f s CPU%s)\n", led.Legs+1, time.Now().UTC().Format(time.RFC3339), led.WallS, led.CPUS, how)
	}
	fmt.Fprintf(f, "# %s %s\n", cfg.Bin, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, cfg.Bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 60 * time.Second
	start := time.Now()
	if err = cmd.Start(); err == nil {
		stop, stopped := make(chan struct{}), make(chan struct{})
		go func() { // the leg so far, for a ledger that outlives a kill
			defer close(stopped)
			t := time.NewTicker(ledgerEvery)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					l := led
					l.Running = &legUsage{Started: start, WallS: time.Since(start).Seconds(), CPUS: procCPUSeconds(cmd.Process.Pid)}
					_ = l.write(ledgerPath) // best effort: the leg's end writes it again
				}
			}
		}()
		err = cmd.Wait()
		close(stop)
		<-stopped
	}
	u := usage{wallS: time.Since(start).Seconds()}
	// No ProcessState when the process never started (the context was
	// cancelled before it could, or exec failed): no CPU time to read.
	if ps := cmd.ProcessState; ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok && ru != nil {
			u.cpuS = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		}
	}
	led.addLeg(u.wallS, u.cpuS)
	total := led.usage()
	if werr := led.write(ledgerPath); werr != nil {
		fmt.Fprintf(f, "# experiment: the stage's usage ledger: %v (a resumed leg will not count this one)\n", werr)
	}
	if err != nil {
		return total, fmt.Errorf("%s %s: %v; the end of %s:\n%s", filepath.Base(cfg.Bin), args[0], err, path, tail(path, 12))
	}
	return total, nil
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// run trains and evaluates the cell and returns its rows; key is the
// grid's pending version (its stages' usage ledgers count the legs of it).
func (c cell) run(ctx context.Context, cfg Config, st store.Store, key string, log io.Writer) ([]schemas.ExperimentRow, error) {
	seed := fmt.Sprint(c.seed)
	ck := fmt.Sprintf("checkpoints/xp-%s/s%d", cfg.Name, c.seed)
	logs := filepath.Join(reportDir(cfg), "logs")
	evalOut := fmt.Sprintf("xp-%s-%s", cfg.Name, c.name())
	var train, eval usage
	evalArgs := []string{"evaluate", "--data", cfg.Data, "--seed", seed, "--out", evalOut,
		"--report", filepath.Join(reportDir(cfg), "cells", c.name())}
	evalArgs = append(evalArgs, cfg.evalArgs()...)
	armEval := func(fixed ...string) []string { return overrideFlags(evalArgs, fixed, c.arms[0].EvalFlags) }
	sft := func() error {
		u, err := stage(ctx, cfg, logs, key, c.name()+"-train-sft", append([]string{"train", "sft", "--data", cfg.Data, "--seed", seed, "--out", ck + "/sft"}, cfg.sftArgs()...)...)
		if c.kind == KindSFT {
			train.add(u)
		}
		return err
	}
	fmt.Fprintf(log, "experiment: cell %s\n", c.name())
	switch c.kind {
	case KindBaseline:
		var methods []string
		for _, a := range c.arms {
			methods = append(methods, a.Method)
		}
		evalArgs = append(evalArgs, "--methods", strings.Join(methods, ","))
		if slices.Contains(methods, "policy") {
			evalArgs = append(evalArgs, cfg.policyArgs()...)
		}
	case KindSFT:
		if err := sft(); err != nil {
			return nil, err
		}
		evalArgs = armEval("--methods", "sft", "--sft", ck+"/sft")
	case KindPPO:
		if err := sft(); err != nil { // a no-op when the seed's SFT cell ran
			return nil, err
		}
		args := append([]string{"train", "ppo", "--data", cfg.Data, "--seed", seed, "--sft", ck + "/sft", "--out", ck + "/" + c.arms[0].Name}, cfg.ppoArgs(c.arms[0])...)
		u, err := stage(ctx, cfg, logs, key, c.name()+"-train-ppo", args...)
		train.add(u)
		if err != nil {
			return nil, err
		}
		evalArgs = armEval("--methods", "sft+ppo", "--sft", ck+"/sft", "--ppo", ck+"/"+c.arms[0].Name)
	}
	u, err := stage(ctx, cfg, logs, key, c.name()+"-evaluate", evalArgs...)
	eval.add(u)
	if err != nil {
		return nil, err
	}
	m, err := datasets.Latest(ctx, st, evalOut)
	if err != nil {
		return nil, err
	}
	results, err := datasets.ReadAll[schemas.EvalResult](ctx, st, m, schemas.EvalResults)
	if err != nil {
		return nil, err
	}
	var pm ppoMetrics
	if c.kind == KindPPO {
		if pm, err = readPPOMetrics(ctx, st, ck+"/"+c.arms[0].Name); err != nil {
			return nil, err
		}
	}
	arm := map[string]string{}
	for _, a := range c.arms {
		switch a.Kind {
		case KindBaseline:
			arm[a.Method] = a.Name
		case KindSFT:
			arm["sft"] = a.Name
		case KindPPO:
			arm["sft+ppo"] = a.Name
		}
	}
	mBest, err := taskMBest(ctx, st)
	if err != nil {
		return nil, err
	}
	evalTime := evalPhases(results, arm)
	var rows []schemas.ExperimentRow
	for _, r := range results {
		name, ok := arm[r.Method]
		if !ok {
			continue
		}
		rows = append(rows, schemas.ExperimentRow{Grid: cfg.Name, Arm: name, Seed: int64(c.seed), Method: r.Method, TaskID: r.TaskID, Split: r.Split,
			Metric: r.Metric, Direction: r.Direction, Trajectory: r.Trajectory, MInit: r.MInit, FinalScore: r.FinalScore, BestScore: r.BestScore,
			DeltaR: deltaR(r.Direction, r.MInit, r.FinalScore), Steps: r.Steps, ValidActions: validActions(r.Outcomes),
			TrainWallS: train.wallS, TrainCPUS: train.cpuS, EvalWallS: eval.wallS, EvalCPUS: eval.cpuS,
			RewardCurve: pm.reward, ValidCurve: pm.valid, Curve: pm.curve, Updates: pm.updates,
			SampleClasses: pm.classes, FailedMarkers: pm.failedMarkers, DurationReward: pm.durationReward, StalenessByDuration: pm.staleness,
			UpdateDurations: pm.durations, PPOTime: pm.time, EvalTime: evalTime})
		row := &rows[len(rows)-1]
		b, ok := mBest[r.TaskID]
		if r.MBest != nil { // the m_best of the part the row is scored on (eval_results 1.3)
			b, ok = *r.MBest, true
		}
		if ok {
			if h, ok := env.HeadroomShare(r.MInit, b, r.FinalScore); ok {
				row.Headroom = &h
			}
		}
		row.ScoredOn = r.ScoredOn
		if row.ScoredOn == "" {
			row.ScoredOn = schemas.ScoredAll
		}
		if r.MInitPublic != nil && r.FinalScorePublic != nil {
			row.MInitPublic, row.FinalScorePublic = r.MInitPublic, r.FinalScorePublic
			d := deltaR(r.Direction, *r.MInitPublic, *r.FinalScorePublic)
			row.DeltaRPublic = &d
			if r.MBestPublic != nil {
				if h, ok := env.HeadroomShare(*r.MInitPublic, *r.MBestPublic, *r.FinalScorePublic); ok {
					row.HeadroomPublic = &h
				}
			}
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s holds no rows of the cell's methods", m.URI)
	}
	return rows, nil
}

// evalPhases sums the generate, wait and execute seconds of the
// evaluation's trajectories of the cell's methods (arm: method -> arm
// name); a phase that no trajectory recorded (eval_results before 1.2, or
// methods without an agent) is absent.
func evalPhases(results []schemas.EvalResult, arm map[string]string) []schemas.PhaseTime {
	names := []string{"generate", "wait", "execute"}
	var sums [3]float64
	var seen [3]bool
	for _, r := range results {
		if _, ok := arm[r.Method]; !ok {
			continue
		}
		for i, v := range []*float64{r.GenerateS, r.WaitS, r.ExecuteS} {
			if v != nil {
				sums[i] += *v
				seen[i] = true
			}
		}
	}
	var out []schemas.PhaseTime
	for i, name := range names {
		if seen[i] {
			out = append(out, schemas.PhaseTime{Phase: name, WallS: sums[i]})
		}
	}
	return out
}

// taskMBest maps each task of the data root's tasks dataset to its m_best
// (the share of the headroom closed needs it).
func taskMBest(ctx context.Context, st store.Store) (map[string]float64, error) {
	m, err := datasets.Latest(ctx, st, schemas.Tasks.Name)
	if err != nil {
		return nil, fmt.Errorf("experiment: the tasks dataset (m_best of each task): %w", err)
	}
	tasks, err := datasets.ReadAll[schemas.Task](ctx, st, m, schemas.Tasks)
	if err != nil {
		return nil, fmt.Errorf("experiment: reading m_best from the tasks dataset: %w", err)
	}
	out := make(map[string]float64, len(tasks))
	for _, t := range tasks {
		out[t.TaskID] = t.MBest
	}
	return out, nil
}

// deltaR is ML-Agent's relative gain: beta (final - m_init) / m_init,
// beta -1 for lower-is-better metrics.
func deltaR(direction string, mInit, final float64) float64 {
	if mInit == 0 {
		return 0
	}
	d := (final - mInit) / mInit
	if direction == schemas.LowerIsBetter {
		return -d
	}
	return d
}

// validActions counts the steps whose action the environment accepted.
func validActions(outcomes []string) int32 {
	n := int32(0)
	for _, o := range outcomes {
		if env.Accepted(env.Outcome(o)) {
			n++
		}
	}
	return n
}

// reportDir is where the report, the cells' evaluation reports and the
// stages' logs go.
func reportDir(cfg Config) string {
	if cfg.Report != "" {
		return cfg.Report
	}
	if strings.Contains(cfg.Data, "://") {
		return filepath.Join(".", "experiment-"+cfg.Name)
	}
	return filepath.Join(cfg.Data, "reports", "experiment-"+cfg.Name)
}
