package agents

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"

	"github.com/mlerl/mlerl/schemas"
)

// Pools are one task's kept ideas, per category, in selection-rank order.
type Pools map[string][]schemas.Idea

// BuildPools groups the kept ideas of the ideas dataset by task and
// category, ordered by rank.
func BuildPools(ideas []schemas.Idea) map[string]Pools {
	out := map[string]Pools{}
	for _, i := range ideas {
		if !i.Kept {
			continue
		}
		if out[i.TaskID] == nil {
			out[i.TaskID] = Pools{}
		}
		out[i.TaskID][i.Category] = append(out[i.TaskID][i.Category], i)
	}
	for _, p := range out {
		for _, list := range p {
			sort.Slice(list, func(a, b int) bool { return list[a].Rank < list[b].Rank })
		}
	}
	return out
}

// SamplePlan draws an initial action plan (ML-Agent): 1 to 3 categories
// among those with kept ideas, in shuffled order, and one idea from each
// category's pool.
func SamplePlan(rng *rand.Rand, pools Pools) ([]schemas.Idea, error) {
	var cats []string
	for _, c := range schemas.Categories {
		if len(pools[c]) > 0 {
			cats = append(cats, c)
		}
	}
	if len(cats) == 0 {
		return nil, fmt.Errorf("no kept ideas in any category")
	}
	rng.Shuffle(len(cats), func(i, j int) { cats[i], cats[j] = cats[j], cats[i] })
	n := 1 + rng.IntN(min(3, len(cats)))
	plan := make([]schemas.Idea, n)
	for i, c := range cats[:n] {
		pool := pools[c]
		plan[i] = pool[rng.IntN(len(pool))]
	}
	return plan, nil
}

// TrajectorySeed derives a trajectory's seed from the run seed and its id,
// so that any trajectory can be re-run alone with the same behaviour.
func TrajectorySeed(seed int64, id string) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", seed, id)
	return int64(h.Sum64() & (1<<63 - 1))
}
