package train

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/schemas"
)

// Outcome is what the environment returns for one action from one state.
type Outcome struct {
	// Reward is the scalar reward (the sum of Terms).
	Reward float64
	Terms  []schemas.RewardTerm
	// DurationS is the step's duration in seconds (the whole step: the
	// edit or undo and its run, the script and its grading): the dt_k of
	// the duration-aware gradient.
	DurationS float64
	// FormatError marks an action that did not parse (bad format, unknown
	// action, bad arguments).
	FormatError bool
	// Valid: the action parsed and the environment carried it out (not
	// refused, not an invalid edit), whatever its result.
	Valid bool
	// Class is the step's env.Outcome and Action its action's name ("" when
	// it did not parse): the outcome shares of the reward-hacking watch.
	Class, Action string
	// Executed: a script ran (an Execute Script, or an edit or undo with
	// its run); LastMarker is the last instrumentation marker its output
	// reached ("" when none, or no script ran).
	Executed   bool
	LastMarker string
	// Unchanged: an edit the environment accepted left its file as it
	// was (its reply says so, as evaluation's behaviour count reads it).
	Unchanged bool
}

// RewardFunc restores state's snapshot, executes action and scores it. It
// is called from several goroutines at once. An error means the
// environment failed (not the action: a bad action is a reward); the
// sample is dropped and counted.
type RewardFunc func(ctx context.Context, state schemas.RLState, action string) (Outcome, error)

// openReward opens the reward named in cfg.Reward: "env" (the sandboxed
// environment with the agentic-ML reward, see EnvReward) or "format"
// (format only, no execution); close releases it.
func openReward(ctx context.Context, cfg PPOConfig) (reward RewardFunc, close func() error, err error) {
	switch cfg.Reward {
	case RewardEnv:
		return openEnvReward(ctx, cfg)
	case RewardFormat:
		return FormatReward, func() error { return nil }, nil
	}
	return nil, nil, fmt.Errorf("reward %q: want %s or %s", cfg.Reward, RewardEnv, RewardFormat)
}

// Reward names for PPOConfig.Reward.
const (
	RewardEnv    = "env"
	RewardFormat = "format"
)

// FormatReward scores only the action's format, without executing it: -1
// when the environment's strict parser (env.Parse) rejects the answer,
// else 0. It is a smoke-test reward (no environment needed), not the
// paper's reward.
func FormatReward(_ context.Context, _ schemas.RLState, action string) (Outcome, error) {
	a, err := env.Parse(action)
	if err != nil {
		return Outcome{Reward: -1, Terms: []schemas.RewardTerm{{Name: "format", Value: -1}}, FormatError: true, Class: string(env.OutcomeFormatError)}, nil
	}
	return Outcome{Terms: []schemas.RewardTerm{{Name: "format", Value: 0}}, Valid: true, Class: string(env.OutcomeSuccess), Action: a.Name}, nil
}

// actionKey is the cache key form of an action: its name and canonical
// JSON input when it parses (what the environment acts on: Reflection,
// Thought and layout do not change the outcome), else the answer with
// every run of white space made one space.
func actionKey(text string) string {
	if a, err := env.Parse(text); err == nil {
		return "action\x00" + a.Name + "\x00" + a.Input()
	}
	return "unparsed\x00" + strings.Join(strings.Fields(text), " ")
}

// cacheKey is (snapshot, parsed action), plus the metric before the
// action, which the improvement reward also depends on. States without a
// snapshot are keyed by their id.
func cacheKey(s schemas.RLState, action string) string {
	snap := s.SnapshotRef
	if snap == "" {
		snap = "state:" + s.StateID
	}
	prev := "none"
	if s.MetricPrev != nil {
		prev = fmt.Sprint(*s.MetricPrev)
	}
	return snap + "\x00" + prev + "\x00" + actionKey(action)
}

// rewardCache memoises outcomes by (snapshot, parsed action); a second
// request for a key being executed waits for the first.
type rewardCache struct {
	mu      sync.Mutex
	entries map[string]*cacheEntry
	hits    int
	misses  int
}

type cacheEntry struct {
	done chan struct{}
	out  Outcome
	err  error
}

func newRewardCache() *rewardCache { return &rewardCache{entries: map[string]*cacheEntry{}} }

// get returns the outcome of (state, action), executing it at most once
// per key. Failed executions are not cached.
func (c *rewardCache) get(ctx context.Context, fn RewardFunc, s schemas.RLState, action string) (Outcome, bool, error) {
	key := cacheKey(s, action)
	c.mu.Lock()
	if e, ok := c.entries[key]; ok {
		c.hits++
		c.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return Outcome{}, true, ctx.Err()
		}
		return e.out, true, e.err
	}
	e := &cacheEntry{done: make(chan struct{})}
	c.entries[key] = e
	c.misses++
	c.mu.Unlock()
	e.out, e.err = fn(ctx, s, action)
	if e.err != nil {
		c.mu.Lock()
		delete(c.entries, key)
		c.mu.Unlock()
	}
	close(e.done)
	return e.out, false, e.err
}
