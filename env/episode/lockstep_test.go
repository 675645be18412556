package episode

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/llm"
)

// recorder answers "<state>@<round>" and records every batch.
type recorder struct {
	mu      sync.Mutex
	batches []string
}

func (r *recorder) ActBatch(_ context.Context, obs []agents.Observation, _ [][]string, seed uint64) ([]string, []llm.Usage, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	states := make([]string, len(obs))
	for i, o := range obs {
		states[i] = o.Compact
	}
	r.batches = append(r.batches, strings.Join(states, ","))
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = fmt.Sprintf("%s@%d", s, len(r.batches))
	}
	return out, make([]llm.Usage, len(states)), nil
}

// Member i acts i+1 times, so the rounds shrink as members finish; the
// batches must be the same whatever the goroutines' timing.
func TestLockstepRounds(t *testing.T) {
	want := []string{"m0,m1,m2", "m1,m2", "m2"}
	for try := range 20 {
		rec := &recorder{}
		ls := NewLockstep(rec, 1, 3)
		ctx := context.Background()
		var wg sync.WaitGroup
		answers := make([][]string, 3)
		for i := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer ls.Leave(ctx, i)
				for range i + 1 {
					text, _, _, err := ls.act(ctx, i, agents.Observation{Compact: fmt.Sprintf("m%d", i)}, nil)
					if err != nil {
						t.Error(err)
						return
					}
					answers[i] = append(answers[i], text)
				}
			}()
		}
		wg.Wait()
		if got := strings.Join(rec.batches, " | "); got != strings.Join(want, " | ") {
			t.Fatalf("try %d: got batches %q, want %q", try, got, strings.Join(want, " | "))
		}
		if got := strings.Join(answers[2], ","); got != "m2@1,m2@2,m2@3" {
			t.Fatalf("try %d: member 2 got %q, want its answers of rounds 1-3", try, got)
		}
	}
}

// TestLockstepReportsTheWait: a member that asks first waits for the
// other's request before its batch begins, and its agent says so
// (agents.Waiter); the member whose request completes the batch waits
// (almost) nothing.
func TestLockstepReportsTheWait(t *testing.T) {
	const late = 80 * time.Millisecond
	ls := NewLockstep(&recorder{}, 1, 2)
	early, last := ls.Agent(0, nil), ls.Agent(1, nil)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, _, err := early.Act(ctx, agents.Observation{Compact: "m0"})
		done <- err
	}()
	// The early member's request is pending before the late one's wait
	// begins (on a loaded machine the goroutine may start after a bare
	// sleep has begun, and its wait come out shorter than late).
	for {
		ls.mu.Lock()
		n := len(ls.pending)
		ls.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(late)
	if _, _, err := last.Act(ctx, agents.Observation{Compact: "m1"}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	we, wl := early.(agents.Waiter).LastWait(), last.(agents.Waiter).LastWait()
	if we < late || wl > late/4 {
		t.Errorf("waits: the early member %v (want >= %v), the last %v (want about 0)", we, late, wl)
	}
}
