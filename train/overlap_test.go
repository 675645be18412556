package train

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// A chunk's actions run while the next chunk generates: the first chunk's
// steps wait until the second chunk's generation has started, which a
// step loop that waits for its chunk before generating the next would
// never reach.
func TestOverlapChunksRunsChunksWhileTheNextGenerates(t *testing.T) {
	secondGen := make(chan struct{})
	var mu sync.Mutex
	var calls [][2]int
	stepped := map[int]string{}
	generate := func(a, b int) ([]*sample, error) {
		mu.Lock()
		calls = append(calls, [2]int{a, b})
		mu.Unlock()
		if a == 2 {
			close(secondGen)
		}
		var out []*sample
		for j := a; j < b; j++ {
			out = append(out, &sample{Text: fmt.Sprintf("action %d", j)})
		}
		return out, nil
	}
	step := func(ctx context.Context, j int, s *sample) error {
		if j < 2 {
			select {
			case <-secondGen:
			case <-time.After(10 * time.Second):
				return fmt.Errorf("episode %d: the next chunk did not generate while this one ran", j)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if _, again := stepped[j]; again {
			return fmt.Errorf("episode %d stepped twice", j)
		}
		stepped[j] = s.Text
		return nil
	}
	genS, err := overlapChunks(context.Background(), 2, 5, 2, generate, step)
	if err != nil {
		t.Fatal(err)
	}
	if want := [][2]int{{0, 2}, {2, 4}, {4, 5}}; !slices.Equal(calls, want) {
		t.Errorf("generation calls %v, want %v (one per chunk of 2)", calls, want)
	}
	for j := range 5 {
		if stepped[j] != fmt.Sprintf("action %d", j) {
			t.Errorf("episode %d stepped with %q, want its own action", j, stepped[j])
		}
	}
	if genS < 0 {
		t.Errorf("generation seconds %v", genS)
	}
}

func TestOverlapChunksStopsOnTheFirstError(t *testing.T) {
	boom := errors.New("boom")
	gen := func(a, b int) ([]*sample, error) { return make([]*sample, b-a), nil }
	t.Run("step", func(t *testing.T) {
		var mu sync.Mutex
		ran := 0
		step := func(ctx context.Context, j int, s *sample) error {
			mu.Lock()
			defer mu.Unlock()
			ran++
			if j == 0 {
				return boom
			}
			return nil
		}
		if _, err := overlapChunks(context.Background(), 1, 40, 4, gen, step); !errors.Is(err, boom) {
			t.Fatalf("got %v, want the step's error", err)
		}
		if ran == 40 {
			t.Errorf("all 40 steps ran after the first failed")
		}
	})
	t.Run("generate", func(t *testing.T) {
		failing := func(a, b int) ([]*sample, error) {
			if a > 0 {
				return nil, boom
			}
			return gen(a, b)
		}
		step := func(ctx context.Context, j int, s *sample) error { return nil }
		if _, err := overlapChunks(context.Background(), 2, 8, 4, failing, step); !errors.Is(err, boom) {
			t.Fatalf("got %v, want the generation's error", err)
		}
	})
	t.Run("short generation", func(t *testing.T) {
		short := func(a, b int) ([]*sample, error) { return make([]*sample, 1), nil }
		step := func(ctx context.Context, j int, s *sample) error { return nil }
		if _, err := overlapChunks(context.Background(), 2, 8, 4, short, step); err == nil {
			t.Fatal("a generation call that returned fewer actions than episodes passed")
		}
	})
}
