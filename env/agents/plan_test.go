package agents

import (
	"math/rand/v2"
	"testing"

	"github.com/mlerl/mlerl/schemas"
)

func TestSamplePlan(t *testing.T) {
	var ideas []schemas.Idea
	for _, c := range schemas.Categories {
		for r := 0; r < 4; r++ {
			ideas = append(ideas, schemas.Idea{IdeaID: c + string(rune('a'+r)), TaskID: "t", Category: c, Kept: true, Rank: int32(r)})
		}
	}
	ideas = append(ideas, schemas.Idea{IdeaID: "dropped", TaskID: "t", Category: "data", Kept: false, Rank: -1})
	pools := BuildPools(ideas)["t"]
	sizes := map[int]int{}
	firstCat := map[string]int{}
	for seed := uint64(0); seed < 600; seed++ {
		plan, err := SamplePlan(rand.New(rand.NewPCG(seed, 1)), pools)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := SamplePlan(rand.New(rand.NewPCG(seed, 1)), pools)
		if len(again) != len(plan) || again[0].IdeaID != plan[0].IdeaID {
			t.Fatalf("seed %d: plan not reproducible", seed)
		}
		sizes[len(plan)]++
		firstCat[plan[0].Category]++
		seen := map[string]bool{}
		for _, p := range plan {
			if p.IdeaID == "dropped" {
				t.Fatalf("seed %d: a dropped idea was planned", seed)
			}
			if seen[p.Category] {
				t.Fatalf("seed %d: two ideas of category %s", seed, p.Category)
			}
			seen[p.Category] = true
		}
	}
	for n := 1; n <= 3; n++ {
		if sizes[n] < 150 {
			t.Errorf("plans of %d ideas: got %d of 600, want about 200", n, sizes[n])
		}
	}
	for _, c := range schemas.Categories {
		if firstCat[c] < 150 {
			t.Errorf("category %s first: got %d of 600, want about 200 (order must be shuffled)", c, firstCat[c])
		}
	}
	if _, err := SamplePlan(rand.New(rand.NewPCG(1, 1)), Pools{}); err == nil {
		t.Error("empty pools: got no error")
	}
}
