package train

import (
	"context"
	"sync"
)

// collector runs the reward function on submitted samples in worker
// goroutines while the learner generates and updates (the asynchronous
// actors of the duration-aware paper); results arrive in completion
// order, so fast actions come back first.
type collector struct {
	jobs, results chan *sample
	outstanding   int // submitted, not yet received
	stop          context.CancelFunc
	workers       sync.WaitGroup
	cache         *rewardCache
}

// newCollector starts workers goroutines that execute reward on the
// samples submitted, through a cache keyed on (snapshot, parsed
// action).
func newCollector(ctx context.Context, reward RewardFunc, workers, capacity int) *collector {
	wctx, stop := context.WithCancel(ctx)
	c := &collector{jobs: make(chan *sample, capacity), results: make(chan *sample, capacity), stop: stop, cache: newRewardCache()}
	for range workers {
		c.workers.Add(1)
		go func() {
			defer c.workers.Done()
			for s := range c.jobs {
				if wctx.Err() != nil {
					return // the run ended: drop queued actions
				}
				s.Out, s.Cached, s.Err = c.cache.get(wctx, reward, s.State, s.Text)
				select {
				case c.results <- s:
				case <-wctx.Done():
					return
				}
			}
		}()
	}
	return c
}

// submit queues a sample for its reward.
func (c *collector) submit(s *sample) {
	c.jobs <- s
	c.outstanding++
}

// poll returns a finished sample if one is ready.
func (c *collector) poll() (*sample, bool) {
	select {
	case s := <-c.results:
		c.outstanding--
		return s, true
	default:
		return nil, false
	}
}

// wait blocks for the next finished sample.
func (c *collector) wait(ctx context.Context) (*sample, error) {
	select {
	case s := <-c.results:
		c.outstanding--
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// close cancels in-flight actions and waits for the workers, so that no
// reward call outlives the run.
func (c *collector) close() {
	c.stop()
	close(c.jobs)
	c.workers.Wait()
}
