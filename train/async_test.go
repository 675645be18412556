package train

import (
	"bytes"
	"container/heap"
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/schemas"
)

// completion is a simulated actor's sample finishing at a virtual time.
type completion struct {
	at    float64
	actor int
	s     *sample
}

type completions []completion

func (c completions) Len() int { return len(c) }
func (c completions) Less(i, j int) bool {
	return c[i].at < c[j].at || c[i].at == c[j].at && c[i].actor < c[j].actor
}
func (c completions) Swap(i, j int) { c[i], c[j] = c[j], c[i] }
func (c *completions) Push(x any)   { *c = append(*c, x.(completion)) }
func (c *completions) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// TestAsyncCollectorFrequencyBias drives the asynchronous collector's
// batching rule (asyncBatcher, actorPools, durationWeights) with a
// simulated clock: two tasks, one whose actions take 1 s and one whose
// actions take 10 s, each served by its own actor as actorPools assigns
// them; each update takes the first 32 completions. Unweighted, the slow
// task gets about 1/11 of the updates' samples (the frequency bias);
// weighted by duration it gets half of their weight, as many actions'
// worth as the fast task per unit of time (the correction). The weights
// are normalised per batch (the paper's dt / batch mean), so the
// correction needs batches that hold both kinds: with 4 samples per
// update most batches hold only fast ones and it is partial (measured
// below too).
func TestAsyncCollectorFrequencyBias(t *testing.T) {
	var states []schemas.RLState
	for i := range 6 {
		states = append(states, schemas.RLState{StateID: fmt.Sprint("f", i), TaskID: "fast"}, schemas.RLState{StateID: fmt.Sprint("s", i), TaskID: "slow"})
	}
	pools := actorPools(states, 2)
	for i, p := range pools {
		for _, s := range p {
			if s.TaskID != p[0].TaskID {
				t.Fatalf("actor %d serves tasks %s and %s: with as many actors as tasks each serves one", i, p[0].TaskID, s.TaskID)
			}
		}
	}
	dur := map[string]float64{"fast": 1, "slow": 10}
	version := 0
	q := &completions{}
	start := func(actor int, at float64) {
		st := pools[actor][0]
		heap.Push(q, completion{at: at + dur[st.TaskID], actor: actor, s: &sample{State: st, Version: version, Out: Outcome{DurationS: dur[st.TaskID]}}})
	}
	for a := range pools {
		start(a, 0)
	}
	share := func(n int) (unweighted, weighted float64) {
		var b asyncBatcher
		var slowN, allN, slowW, allW float64
		updates := 0
		for updates < 200 {
			c := heap.Pop(q).(completion)
			b.add(c.s)
			start(c.actor, c.at) // the actor starts over at once
			batch, _ := b.take(version, 4, n)
			if batch == nil {
				continue
			}
			d := make([]float64, len(batch))
			for i, s := range batch {
				d[i] = s.Out.DurationS
			}
			w := durationWeights(d, 0.5, true)
			for i, s := range batch {
				allN++
				allW += w[i]
				if s.State.TaskID == "slow" {
					slowN++
					slowW += w[i]
				}
			}
			version++
			updates++
		}
		return slowN / allN, slowW / allW
	}
	unweighted, weighted := share(32)
	t.Logf("32 per update: the slow task's share is %.3f of the samples, %.3f of the weight", unweighted, weighted)
	if math.Abs(unweighted-1.0/11) > 0.02 {
		t.Errorf("unweighted, the slow task got %.3f of the samples, want about 1/11 (the bias)", unweighted)
	}
	if math.Abs(weighted-0.5) > 0.05 {
		t.Errorf("weighted by duration, the slow task got %.3f of the weight, want about 1/2 (the correction)", weighted)
	}
	small, smallW := share(4)
	t.Logf("4 per update: %.3f of the samples, %.3f of the weight", small, smallW)
	if !(smallW > small+0.1 && smallW < weighted-0.1) {
		t.Errorf("4 per update: weight share %.3f, want between the unweighted %.3f and 32's %.3f (a partial correction)", smallW, small, weighted)
	}
}

// TestAsyncBatcherTakesTheFirstCompletions: an update takes the first n
// usable completions in completion order, drops those older than
// max_staleness, and leaves the rest for the next update.
func TestAsyncBatcherTakesTheFirstCompletions(t *testing.T) {
	var b asyncBatcher
	for i, v := range []int{3, 1, 3, 2, 3, 3} {
		b.add(&sample{Version: v, Text: fmt.Sprint(i)})
	}
	batch, stale := b.take(3, 1, 3)
	names := func(ss []*sample) string {
		var out []string
		for _, s := range ss {
			out = append(out, s.Text)
		}
		return strings.Join(out, ",")
	}
	if names(batch) != "0,2,3" || names(stale) != "1" {
		t.Fatalf("batch %q stale %q, want 0,2,3 and 1", names(batch), names(stale))
	}
	if batch, _ := b.take(3, 1, 3); batch != nil || b.ready() != 2 {
		t.Fatalf("with 2 left an update of 3 must wait: got %q, %d waiting", names(batch), b.ready())
	}
}

// TestAsyncPPORuns: the asynchronous collector trains with the critic on
// a fake reward whose actions take known times, records each update's
// samples with their staleness, and stops cleanly.
func TestAsyncPPORuns(t *testing.T) {
	root := t.TempDir()
	setupPPO(t, root)
	cfg := tinyPPOConfig(root)
	cfg.Collector, cfg.Advantage, cfg.GroupSize, cfg.BatchSize, cfg.GenBatch, cfg.Minibatches = CollectorAsync, AdvantageCritic, 1, 8, 1, 2
	cfg.Updates, cfg.Workers, cfg.MaxStaleness, cfg.CriticWarmup = 4, 3, 1, 5
	slow := func(ctx context.Context, s schemas.RLState, a string) (Outcome, error) {
		d := 2 * time.Millisecond
		if strings.HasPrefix(a, "d") {
			d = 20 * time.Millisecond
		}
		time.Sleep(d)
		out, err := pickD(ctx, s, a)
		out.DurationS = d.Seconds()
		return out, err
	}
	var log bytes.Buffer
	if err := RunPPOWith(context.Background(), cfg, slow, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	ms := readMetrics(t, root, "checkpoints/ppo")
	n := 0
	for _, m := range ms {
		if m["stage"] != "ppo" {
			continue
		}
		n++
		used := 0
		for _, u := range m["samples/used"].([]any) {
			if u.(bool) {
				used++
			}
		}
		if m["collector"] != CollectorAsync || used != cfg.BatchSize || len(m["samples/duration_s"].([]any)) != len(m["samples/used"].([]any)) {
			t.Errorf("update %v: collector %v, %d samples used of %d recorded", m["step"], m["collector"], used, len(m["samples/duration_s"].([]any)))
		}
		if _, ok := m["samples/staleness"].([]any); !ok {
			t.Errorf("update %v records no staleness", m["step"])
		}
	}
	if n != cfg.Updates {
		t.Errorf("%d updates recorded, want %d", n, cfg.Updates)
	}
}
