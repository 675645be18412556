package episode

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/llm"
)

// BatchActor answers several observations (with their episodes' plans)
// in one batched generation (policy.PolicyAgent). The answers may depend
// on the whole batch.
type BatchActor interface {
	ActBatch(ctx context.Context, obs []agents.Observation, plans [][]string, seed uint64) ([]string, []llm.Usage, error)
}

// Lockstep runs N episodes (evaluate: a policy's on one task; train ppo's
// learning curves: on every task at once) in step: each round, once every
// episode still running has asked for its next action, the policy
// answers them all in one batch (in episode order), with a seed
// derived from the group seed and the round. Rounds are therefore the
// same from run to run (a round holds exactly the episodes still running
// at that step), and so are the answers, while the cost of generation is
// shared by the batch.
type Lockstep struct {
	actor BatchActor
	seed  int64

	mu      sync.Mutex
	alive   int
	round   int
	pending map[int]*lockRequest
}

type lockRequest struct {
	obs   agents.Observation
	plan  []string
	reply chan lockReply
}

type lockReply struct {
	text  string
	usage llm.Usage
	err   error
	start time.Time // when the batch began
}

func NewLockstep(actor BatchActor, seed int64, members int) *Lockstep {
	return &Lockstep{actor: actor, seed: seed, alive: members, pending: map[int]*lockRequest{}}
}

// Agent returns member i's agent, whose episode follows plan.
func (l *Lockstep) Agent(i int, plan []string) agents.Agent {
	return &lockAgent{l: l, member: i, plan: plan}
}

// Leave marks member i's episode as finished (call it exactly once, when
// the episode ends for any reason).
func (l *Lockstep) Leave(ctx context.Context, i int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.alive--
	delete(l.pending, i)
	l.maybeRun(ctx)
}

// act asks for member i's next action and waits for its round; wait is
// how long the request waited for the round's batch to begin.
func (l *Lockstep) act(ctx context.Context, i int, obs agents.Observation, plan []string) (_ string, _ llm.Usage, wait time.Duration, _ error) {
	req := &lockRequest{obs: obs, plan: plan, reply: make(chan lockReply, 1)}
	asked := time.Now()
	l.mu.Lock()
	l.pending[i] = req
	l.maybeRun(ctx)
	l.mu.Unlock()
	select {
	case r := <-req.reply:
		return r.text, r.usage, max(r.start.Sub(asked), 0), r.err
	case <-ctx.Done():
		return "", llm.Usage{}, time.Since(asked), ctx.Err()
	}
}

// maybeRun answers the round once every running episode waits. l.mu is held.
func (l *Lockstep) maybeRun(ctx context.Context) {
	if l.alive == 0 || len(l.pending) < l.alive {
		return
	}
	var members []int
	for i := range l.pending {
		members = append(members, i)
	}
	slices.Sort(members)
	obs := make([]agents.Observation, len(members))
	plans := make([][]string, len(members))
	for k, i := range members {
		obs[k], plans[k] = l.pending[i].obs, l.pending[i].plan
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "lockstep/%d/%d", l.seed, l.round)
	l.round++
	start := time.Now()
	texts, usage, err := l.actor.ActBatch(ctx, obs, plans, h.Sum64())
	for k, i := range members {
		r := lockReply{err: err, start: start}
		if err == nil {
			r.text, r.usage = texts[k], usage[k]
		}
		l.pending[i].reply <- r
		delete(l.pending, i)
	}
}

type lockAgent struct {
	l      *Lockstep
	member int
	plan   []string
	wait   time.Duration // the last Act's (agents.Waiter)
}

func (a *lockAgent) Act(ctx context.Context, obs agents.Observation) (string, llm.Usage, error) {
	text, usage, wait, err := a.l.act(ctx, a.member, obs, a.plan)
	a.wait = wait
	return text, usage, err
}

// LastWait is how long the last Act waited for the other members'
// requests before its batch began (agents.Waiter).
func (a *lockAgent) LastWait() time.Duration { return a.wait }
