package train

import (
	"slices"
	"testing"
)

func TestGenerateCacheMatchesFullForward(t *testing.T) {
	cfg := ModelConfig{Vocab: 12, DModel: 32, Heads: 4, Layers: 2, Ctx: 40}
	p, err := NewPolicy(mustBackend(), cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	prompts := [][]int32{
		{BosID, 5, 6, 7},
		{BosID, 9, 4, 4, 4, 5, 6, 11, 10, 8},
		{BosID},
	}
	opts := GenerateOptions{MaxNewTokens: 12}
	got, err := p.Generate(prompts, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, pr := range prompts {
		want, err := p.GenerateGreedyNoCache(pr, opts.MaxNewTokens)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got[i].Tokens, want) {
			t.Errorf("prompt %d: cached greedy got %v, full re-forward want %v", i, got[i].Tokens, want)
		}
	}
}

func TestGenerateDeterministicForSeed(t *testing.T) {
	cfg := ModelConfig{Vocab: 12, DModel: 16, Heads: 2, Layers: 1, Ctx: 32}
	p, err := NewPolicy(mustBackend(), cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	prompts := [][]int32{{BosID, 5}, {BosID, 6, 7}}
	opts := GenerateOptions{Temperature: 1, TopP: 0.9, MaxNewTokens: 10, Seed: 42}
	a, err := p.Generate(prompts, opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Generate(prompts, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if !slices.Equal(a[i].Tokens, b[i].Tokens) {
			t.Errorf("row %d: same seed gave %v then %v", i, a[i].Tokens, b[i].Tokens)
		}
	}
	opts.Seed = 43
	c, err := p.Generate(prompts, opts)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(a[0].Tokens, c[0].Tokens) && slices.Equal(a[1].Tokens, c[1].Tokens) {
		t.Errorf("seeds 42 and 43 gave identical samples %v", a)
	}
}

func TestEndsWithStop(t *testing.T) {
	for _, tc := range []struct {
		name  string
		toks  []int32
		stops [][]int32
		want  bool
	}{
		{"none", []int32{4, 5}, nil, false},
		{"suffix", []int32{4, 5, 6}, [][]int32{{5, 6}}, true},
		{"not suffix", []int32{5, 6, 4}, [][]int32{{5, 6}}, false},
		{"longer stop", []int32{6}, [][]int32{{5, 6}}, false},
	} {
		if got := endsWithStop(tc.toks, tc.stops); got != tc.want {
			t.Errorf("%s: got %v want %v", tc.name, got, tc.want)
		}
	}
}
