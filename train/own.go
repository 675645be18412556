package train

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/schemas"
)

// The policy's own states (DAgger-style). Step-wise PPO trains decisions
// in the expert's states only; a policy that drifts after its own edits
// reaches states no update saw, and compounding errors follow (what runs
// 8 and 10 show as a collapse into repeated edits). With own_states.mix
// > 0, every update snapshots the state that one episode of each group
// reached after its n-step continuation (a state the policy itself
// reached from a pool state), and a share mix of the states each update
// draws comes from a pool of those snapshots. Own states reached from own
// states reach deeper: the pool follows the policy's own trajectories
// step by step. The pool is replaced every refresh updates by the most
// recent pool_size states collected since (a pool of the current
// policy's states, not of every policy's); until its first refresh the
// pool is empty and every state is the expert's.

// OwnStatesConfig configures the own-state pool.
type OwnStatesConfig struct {
	Mix      float64 `yaml:"mix" help:"share of the states each update draws from the policy's own visited states (0: expert states only; needs horizon >= 2)"`
	Refresh  int     `yaml:"refresh" help:"replace the own-state pool every N updates with the states collected since"`
	PoolSize int     `yaml:"pool_size" help:"own states the pool holds (the most recent collected)"`
}

// DefaultOwnStatesConfig is off (expert states only); when on, the pool
// is refreshed every 2 updates and holds at most 64 states.
func DefaultOwnStatesConfig() OwnStatesConfig {
	return OwnStatesConfig{Mix: 0, Refresh: 2, PoolSize: 64}
}

// Validate checks the settings (keys relative to the own_states block).
func (c OwnStatesConfig) Validate() error {
	switch {
	case !(c.Mix >= 0 && c.Mix < 1):
		return config.Errorf("mix", c.Mix, "must be in [0, 1) (0: expert states only; some expert states are always drawn)")
	case c.Refresh < 1:
		return config.Errorf("refresh", c.Refresh, "must be at least 1 (updates between pool refreshes)")
	case c.PoolSize < 1:
		return config.Errorf("pool_size", c.PoolSize, "must be at least 1")
	}
	return nil
}

// ownPool is the pool the draws read (Pool) and the states collected
// since its last refresh (Pending); both are kept in the checkpoint's
// state so that a resumed run draws what it would have.
type ownPool struct {
	Pool    []schemas.RLState `json:"pool,omitempty"`
	Pending []schemas.RLState `json:"pending,omitempty"`
	Drawn   int               `json:"drawn"` // own states drawn so far
}

// drawStart draws a start state: from the own pool with probability
// own_states.mix when the pool holds any, else uniformly from the expert
// states. It reports whether the state is an own one.
func (r *ppoRun) drawStart(starts []schemas.RLState) (schemas.RLState, bool) {
	own := &r.state.Own
	if r.cfg.OwnStates.Mix > 0 && len(own.Pool) > 0 && r.rng.Float64() < r.cfg.OwnStates.Mix {
		own.Drawn++
		return own.Pool[r.rng.IntN(len(own.Pool))], true
	}
	return starts[r.rng.IntN(len(starts))], false
}

// collectOwn snapshots the state one episode of each group reached (the
// first of the group's episodes not yet done) as an own state derived
// from the group's start state, and adds it to the pending states.
func (r *ppoRun) collectOwn(ctx context.Context, envs []*env.Env, plans [][]string, groups []*group, opts agents.Options, steps int) error {
	if r.cfg.OwnStates.Mix == 0 {
		return nil
	}
	k := r.cfg.GroupSize
	for gi, g := range groups {
		for i := gi * k; i < (gi+1)*k; i++ {
			if done, _ := envs[i].Done(); done {
				continue
			}
			ref, err := envs[i].Snapshot(ctx)
			if errors.Is(err, env.ErrNotKept) {
				continue // not kept (over the quota, unreadable): the next episode of the group's, if any
			}
			if err != nil {
				return fmt.Errorf("own state of %s: %w", g.State.StateID, err)
			}
			r.state.Own.Pending = append(r.state.Own.Pending, ownState(g.State, envs[i], plans[i], ref, opts, steps, r.state.Update, gi))
			break
		}
	}
	if n := r.cfg.OwnStates.PoolSize; len(r.state.Own.Pending) > n {
		r.state.Own.Pending = r.state.Own.Pending[len(r.state.Own.Pending)-n:]
	}
	return nil
}

// ownState is the RLState of the snapshot ref of e, reached by steps of
// the policy's actions from parent: its prompt rendered as the episodes
// render theirs (so that its plan reads back), the task's fields copied.
func ownState(parent schemas.RLState, e *env.Env, plan []string, ref string, opts agents.Options, steps, update, gi int) schemas.RLState {
	st := agents.StateOf(e, plan, opts.MaxSteps)
	s := parent
	s.StateID = fmt.Sprintf("own-u%04d-g%02d", update, gi)
	s.TrajectoryID = "own:" + strings.TrimPrefix(parent.TrajectoryID, "own:") // the expert trajectory it descends from
	s.StepIndex = parent.StepIndex + int32(steps)
	s.Prompt, s.FullPrompt, s.SnapshotRef = opts.Compact(st), "", ref
	cur := e.Current()
	s.MetricPrev = &cur
	s.ExpertAction, s.ExpertReward, s.ExpertExecS = "", 0, 0
	return s
}

// refreshOwn replaces the pool with the pending states every
// own_states.refresh updates (after update u), and says how many it now
// holds.
func (r *ppoRun) refreshOwn(u int) {
	if r.cfg.OwnStates.Mix == 0 || u%r.cfg.OwnStates.Refresh != 0 || len(r.state.Own.Pending) == 0 {
		return
	}
	r.state.Own.Pool, r.state.Own.Pending = r.state.Own.Pending, nil
}

// recordOwn adds to an update's record the share of its trained and of
// all its groups that started from own states, and the pool's size.
func (r *ppoRun) recordOwn(rec map[string]any, trained, dropped []*group) {
	if r.cfg.OwnStates.Mix == 0 {
		return
	}
	own := func(gs []*group) int {
		n := 0
		for _, g := range gs {
			if g.Own {
				n++
			}
		}
		return n
	}
	if len(trained) > 0 {
		rec["own/trained_share"] = ratio(own(trained), len(trained))
	}
	rec["own/drawn_share"] = ratio(own(trained)+own(dropped), len(trained)+len(dropped))
	rec["own/pool"], rec["own/pending"] = len(r.state.Own.Pool), len(r.state.Own.Pending)
}
