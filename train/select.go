package train

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// A policy chosen by a declared rule. RL's held-in curve peaks and falls
// (runs 8 and 10), so the last checkpoint is not the best one. With rule
// best-held-in, `train ppo` selects the checkpoint of the best held-in
// learning-curve point, if it beats the SFT point (update 0, the policy
// PPO starts from) by at least min_improvement in held-in delta_r, else
// the SFT policy itself (update 0's checkpoint): early stopping on a
// validation set, the held-in tasks. The claim stays on held-out tasks,
// which selection never reads. The rule, its minimum improvement, every
// point and the choice are written to selection.json beside the
// checkpoints, and the chosen folder's name to "selected", which `mlerl
// evaluate` reads by default (policy.SelectedCheckpoint).

// Selection rules.
const (
	SelectAuto       = "auto"
	SelectBestHeldIn = "best-held-in"
	SelectLast       = "last"

	// The statistics best-held-in can compare.
	StatDeltaR   = "delta_r"
	StatHeadroom = "headroom"
)

// SelectConfig configures which checkpoint is selected.
type SelectConfig struct {
	Rule           string  `yaml:"rule" help:"best-held-in (the checkpoint of the best held-in learning-curve point that beats the SFT point by min_improvement, else the SFT policy; needs a held-in curve), last, or auto (best-held-in when the curve evaluates held-in tasks, else last)"`
	MinImprovement float64 `yaml:"min_improvement" help:"best-held-in: the least gain in the held-in statistic over the SFT point (update 0) for a PPO checkpoint to be selected (0.02: 2 points)"`
	Stat           string  `yaml:"stat" help:"best-held-in's statistic: delta_r (mean relative gain over m_init; one task with a tiny m_init can decide it) or headroom (mean share of the headroom m_best - m_init closed, each task clipped to [-1, 1])"`
}

// DefaultSelectConfig is auto with a 2-point minimum improvement: the
// learning curve's held-in delta_r over 2 episodes per task moves by a
// few points between evaluations of the same policy, so a smaller gain
// is not taken as one.
func DefaultSelectConfig() SelectConfig {
	return SelectConfig{Rule: SelectAuto, MinImprovement: 0.02, Stat: StatDeltaR}
}

// Validate checks the settings against the curve that feeds them (keys
// relative to the select block).
func (c SelectConfig) Validate(curve CurveConfig) error {
	switch {
	case c.Rule != SelectAuto && c.Rule != SelectBestHeldIn && c.Rule != SelectLast:
		return config.Errorf("rule", c.Rule, "want %s, %s or %s", SelectAuto, SelectBestHeldIn, SelectLast)
	case !(c.MinImprovement >= 0) || math.IsInf(c.MinImprovement, 0):
		return config.Errorf("min_improvement", c.MinImprovement, "must be a number >= 0 (a gain in held-in delta_r, 0.02 = 2 points)")
	case c.Stat != StatDeltaR && c.Stat != StatHeadroom:
		return config.Errorf("stat", c.Stat, "want %s or %s", StatDeltaR, StatHeadroom)
	case c.Rule == SelectBestHeldIn && !heldInCurve(curve):
		return config.Errorf("rule", c.Rule, "needs a held-in learning curve: set curve.every > 0 with %s in curve.splits, or use rule %s", schemas.HeldIn, SelectLast)
	}
	return nil
}

// effective is the rule that applies: auto resolved by the curve.
func (c SelectConfig) effective(curve CurveConfig) string {
	if c.Rule != SelectAuto {
		return c.Rule
	}
	if heldInCurve(curve) {
		return SelectBestHeldIn
	}
	return SelectLast
}

func heldInCurve(c CurveConfig) bool {
	if c.Every == 0 {
		return false
	}
	for _, s := range c.Splits {
		if s == schemas.HeldIn {
			return true
		}
	}
	return false
}

// CurvePoint is a learning-curve point's held-in statistics: delta_r
// (relative to m_init) and the share of the headroom closed (relative to
// m_best - m_init, clipped to [-1, 1] per task; absent in runs before it
// was recorded).
type CurvePoint struct {
	Update         int      `json:"update"`
	HeldInDelta    float64  `json:"held_in_delta_r"`
	HeldInHeadroom *float64 `json:"held_in_headroom,omitempty"`
}

// value is the point's statistic stat (StatDeltaR or StatHeadroom).
func (p CurvePoint) value(stat string) (float64, bool) {
	if stat == StatHeadroom {
		if p.HeldInHeadroom == nil {
			return 0, false
		}
		return *p.HeldInHeadroom, true
	}
	return p.HeldInDelta, true
}

// Selection is selection.json: the rule, the points it read and what it
// chose.
type Selection struct {
	Rule           string       `json:"rule"`
	Stat           string       `json:"stat,omitempty"` // the statistic best-held-in compared (empty: delta_r)
	MinImprovement float64      `json:"min_improvement"`
	SFT            *CurvePoint  `json:"sft_point,omitempty"` // update 0
	Points         []CurvePoint `json:"points,omitempty"`    // the PPO points, by update
	Update         int          `json:"selected_update"`
	Checkpoint     string       `json:"selected"` // the folder's name beside selection.json
	Reason         string       `json:"reason"`
}

// SelectBest applies best-held-in on held-in delta_r (SelectBestBy with
// StatDeltaR).
func SelectBest(points []CurvePoint, minImprovement float64) (sel Selection, ok bool) {
	return SelectBestBy(points, StatDeltaR, minImprovement)
}

// SelectBestBy applies best-held-in to the curve points: the earliest
// point of the best held-in statistic stat after update 0, if it beats
// update 0's by at least minImprovement, else update 0. ok is false
// without an update-0 point holding the statistic; points without it are
// skipped.
func SelectBestBy(points []CurvePoint, stat string, minImprovement float64) (sel Selection, ok bool) {
	sel = Selection{Rule: SelectBestHeldIn, Stat: stat, MinImprovement: minImprovement}
	var best *CurvePoint
	var bestV, sftV float64
	for i, p := range points {
		v, has := p.value(stat)
		if !has {
			continue
		}
		switch {
		case p.Update == 0:
			sel.SFT, sftV = &points[i], v
		case best == nil || v > bestV:
			best, bestV = &points[i], v
			fallthrough
		default:
			sel.Points = append(sel.Points, p)
		}
	}
	if sel.SFT == nil {
		return sel, false
	}
	switch {
	case best == nil:
		sel.Reason = "no PPO point yet: the SFT policy"
	case bestV-sftV >= minImprovement-1e-12: // a gain of exactly the minimum counts
		sel.Update = best.Update
		sel.Reason = fmt.Sprintf("update %d has the best held-in %s, %+.2f%%, %+.2f points over the SFT point's %+.2f%% (at least %.2f required)",
			best.Update, stat, 100*bestV, 100*(bestV-sftV), 100*sftV, 100*minImprovement)
	default:
		sel.Reason = fmt.Sprintf("no PPO point beats the SFT point's held-in %s %+.2f%% by %.2f points (the best: update %d, %+.2f%%): the SFT policy",
			stat, 100*sftV, 100*minImprovement, best.Update, 100*bestV)
	}
	return sel, true
}

// curvePoints reads the held-in curve points from the run's metrics.
func (r *ppoRun) curvePoints() []CurvePoint {
	var out []CurvePoint
	for _, line := range r.s.metrics {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["stage"] != "ppo-curve" {
			continue
		}
		u, uok := m["step"].(float64)
		d, dok := m["curve/"+schemas.HeldIn+"/delta_r"].(float64)
		if uok && dok {
			p := CurvePoint{Update: int(u), HeldInDelta: d}
			if h, ok := m["curve/"+schemas.HeldIn+"/headroom"].(float64); ok {
				p.HeldInHeadroom = &h
			}
			out = append(out, p)
		}
	}
	return out
}

// selectCheckpoint writes selection.json and "selected" after an update
// that saved a checkpoint: with best-held-in, the choice among the curve
// points so far (each point's checkpoint was saved with it); with last,
// the latest checkpoint.
func (r *ppoRun) selectCheckpoint(ctx context.Context, saved bool) error {
	if !saved {
		return nil
	}
	rule := r.cfg.Select.effective(r.cfg.Curve)
	sel := Selection{Rule: rule, MinImprovement: r.cfg.Select.MinImprovement, Update: r.state.Update, Reason: "the last checkpoint (rule last)"}
	if rule == SelectBestHeldIn {
		var ok bool
		if sel, ok = SelectBestBy(r.curvePoints(), r.cfg.Select.Stat, r.cfg.Select.MinImprovement); !ok {
			return fmt.Errorf("train ppo: selecting a checkpoint: the metrics hold no held-in learning-curve point at update 0 with %s", r.cfg.Select.Stat)
		}
	}
	sel.Checkpoint = policy.StepFolder(sel.Update)
	if _, err := store.ReadAll(ctx, r.s.st, r.cfg.Out+"/"+sel.Checkpoint+"/state.json"); err != nil {
		return fmt.Errorf("train ppo: selecting update %d: its checkpoint: %w", sel.Update, err)
	}
	b, err := json.MarshalIndent(sel, "", "  ")
	if err != nil {
		return err
	}
	if err := store.WriteAll(ctx, r.s.st, r.cfg.Out+"/selection.json", append(b, '\n'), store.CreateOptions{}); err != nil {
		return fmt.Errorf("train ppo: %w", err)
	}
	if err := store.WriteAll(ctx, r.s.st, r.cfg.Out+"/"+policy.SelectedFile, []byte(sel.Checkpoint+"\n"), store.CreateOptions{}); err != nil {
		return fmt.Errorf("train ppo: %w", err)
	}
	if rule == SelectBestHeldIn {
		fmt.Fprintf(r.s.log, "train ppo: selected %s (%s): %s\n", sel.Checkpoint, rule, sel.Reason)
	}
	return nil
}
