package train

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// stepLog records what playSteps asked of act and step.
type stepLog struct {
	mu       sync.Mutex
	acts     [][]int                  // rows of each act call
	done     map[[2]int]time.Time     // (episode, step) -> when its step ended
	begun    map[[2]int]time.Time     // (episode, step) -> when its step began
	steps    []int                    // actions each episode has taken
	slow     map[[2]int]time.Duration // steps that take longer than 2 ms
	failAt   [2]int
	canceled bool
}

func newStepLog(n int) *stepLog {
	return &stepLog{done: map[[2]int]time.Time{}, begun: map[[2]int]time.Time{}, steps: make([]int, n), slow: map[[2]int]time.Duration{}, failAt: [2]int{-1, -1}}
}

func (l *stepLog) act(rows []int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acts = append(l.acts, slices.Clone(rows))
	for _, i := range rows {
		l.steps[i]++
	}
	return nil
}

func (l *stepLog) step(ctx context.Context, i int) error {
	l.mu.Lock()
	key := [2]int{i, l.steps[i] - 1}
	l.begun[key] = time.Now()
	d, ok := l.slow[key]
	if !ok {
		d = 2 * time.Millisecond
	}
	fail := key == l.failAt
	l.mu.Unlock()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		l.mu.Lock()
		l.canceled = true
		l.mu.Unlock()
		return ctx.Err()
	}
	l.mu.Lock()
	l.done[key] = time.Now()
	l.mu.Unlock()
	if fail {
		return errors.New("step failed")
	}
	return nil
}

func (l *stepLog) more(steps int) func(int) bool {
	return func(i int) bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.steps[i] < steps
	}
}

// TestPlayStepsGoesOnPastAStraggler: two groups of four two-step
// episodes on two workers, episode 5's first script slow. By default the
// other seven act again and finish their second steps while it runs, in
// one generation call, and episode 5 acts alone after it; in lockstep no
// second step starts before the slow first one is back.
func TestPlayStepsGoesOnPastAStraggler(t *testing.T) {
	defer func(g time.Duration) { stragglerGrace = g }(stragglerGrace)
	stragglerGrace = 100 * time.Millisecond // the seven quick steps take a few ms: wide margin on a loaded machine
	slow := [2]int{5, 0}
	for _, lockstep := range []bool{false, true} {
		l := newStepLog(8)
		l.slow[slow] = time.Second
		if _, err := playSteps(context.Background(), 8, 4, 2, lockstep, l.more(2), l.act, l.step); err != nil {
			t.Fatal(err)
		}
		for i, n := range l.steps {
			if n != 2 {
				t.Errorf("lockstep %v: episode %d acted %d times, want 2", lockstep, i, n)
			}
		}
		if len(l.done) != 16 {
			t.Errorf("lockstep %v: %d steps ran, want 16", lockstep, len(l.done))
		}
		all := []int{0, 1, 2, 3, 4, 5, 6, 7}
		if !slices.Equal(l.acts[0], all) {
			t.Errorf("lockstep %v: first call acted for %v, want every episode", lockstep, l.acts[0])
		}
		slowEnd := l.done[slow]
		if lockstep {
			if len(l.acts) != 2 || !slices.Equal(l.acts[1], all) {
				t.Errorf("lockstep: act calls %v, want every episode twice", l.acts)
			}
			for i := range 8 {
				if b := l.begun[[2]int{i, 1}]; b.Before(slowEnd) {
					t.Errorf("lockstep: episode %d's second step began %v before the slow step ended", i, slowEnd.Sub(b))
				}
			}
			continue
		}
		want := [][]int{all, {0, 1, 2, 3, 4, 6, 7}, {5}}
		if !slices.EqualFunc(l.acts, want, slices.Equal) {
			t.Errorf("act calls %v, want %v", l.acts, want)
		}
		for i := range 8 {
			if i == 5 {
				continue
			}
			if e := l.done[[2]int{i, 1}]; !e.Before(slowEnd) {
				t.Errorf("episode %d's second step ended %v after the slow step", i, e.Sub(slowEnd))
			}
		}
	}
}

// TestPlayStepsBatchesTheUsualSpread: steps that end within the grace
// of each other (a batch's usual spread) act again in one call, and
// episodes that are over act no more (one is over from the start).
func TestPlayStepsBatchesTheUsualSpread(t *testing.T) {
	defer func(g time.Duration) { stragglerGrace = g }(stragglerGrace)
	stragglerGrace = time.Second
	l := newStepLog(8)
	l.slow[[2]int{5, 0}] = 60 * time.Millisecond
	more := func(i int) bool { return (i%2 == 0 || l.steps[i] == 0) && i != 7 && l.more(3)(i) } // odd episodes end after one step, 7 never acts
	if _, err := playSteps(context.Background(), 8, 4, 2, false, more, l.act, l.step); err != nil {
		t.Fatal(err)
	}
	want := [][]int{{0, 1, 2, 3, 4, 5, 6}, {0, 2, 4, 6}, {0, 2, 4, 6}}
	if !slices.EqualFunc(l.acts, want, slices.Equal) {
		t.Errorf("act calls %v, want %v", l.acts, want)
	}
}

// TestPlayStepsStopsOnAnError: a failed step ends the play with its
// error, and the slow step still running is cancelled, not waited for.
func TestPlayStepsStopsOnAnError(t *testing.T) {
	l := newStepLog(8)
	l.slow[[2]int{0, 0}] = 5 * time.Second
	l.failAt = [2]int{2, 0}
	start := time.Now()
	_, err := playSteps(context.Background(), 8, 4, 2, false, l.more(2), l.act, l.step)
	if err == nil || err.Error() != "step failed" {
		t.Fatalf("got error %v, want the failed step's", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("returned after %v: the slow step was waited for", d)
	}
	if !l.canceled {
		t.Error("the slow step was not cancelled")
	}
}

// TestRowSeedsDiffer: an episode's steps and different episodes and
// seeds draw from different streams.
func TestRowSeedsDiffer(t *testing.T) {
	seen := map[uint64]string{}
	for seed := range int64(3) {
		for ep := range int64(200) {
			for step := range 8 {
				s := rowSeed(seed, ep, step)
				if prev, ok := seen[s]; ok {
					t.Fatalf("seed %d episode %d step %d: the stream of %s", seed, ep, step, prev)
				}
				seen[s] = "another"
			}
		}
	}
}
