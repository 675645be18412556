package train

import (
	"testing"

	"github.com/gomlx/compute"
	_ "github.com/gomlx/compute/gobackend"
)

func tinyConfig() ModelConfig {
	return ModelConfig{Vocab: 16, DModel: 16, Heads: 2, Layers: 2, Ctx: 32}
}

func TestForwardPackedIsolation(t *testing.T) {
	p, err := NewPolicy(mustBackend(), tinyConfig(), 1)
	if err != nil {
		t.Fatal(err)
	}
	// Row 0 packs two examples; row 1 holds the second one alone, padded.
	in := batchInput{B: 2, S: 6,
		Tokens:    []int32{2, 5, 6, 2, 7, 8, 2, 7, 8, 0, 0, 0},
		Positions: []int32{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 0, 0},
		Segments:  []int32{1, 1, 1, 2, 2, 2, 1, 1, 1, 0, 0, 0},
	}
	logits, values, err := p.Forward(in)
	if err != nil {
		t.Fatal(err)
	}
	V := p.Cfg.Vocab
	for pos := range 3 {
		for j := range V {
			a, b := logits[(3+pos)*V+j], logits[(6+pos)*V+j]
			if d := a - b; d > 1e-4 || d < -1e-4 {
				t.Fatalf("packed example logits differ at pos %d vocab %d: got %v want %v", pos, j, a, b)
			}
		}
		if d := values[3+pos] - values[6+pos]; d > 1e-4 || d < -1e-4 {
			t.Fatalf("packed example values differ at pos %d: got %v want %v", pos, values[3+pos], values[6+pos])
		}
	}
	t.Logf("params %d (formula %d)", p.NumParams(), p.Cfg.NumParams())
	if p.NumParams() != p.Cfg.NumParams() {
		t.Errorf("NumParams: got %d want %d", p.NumParams(), p.Cfg.NumParams())
	}
}

func mustBackend() compute.Backend {
	b, err := NewBackend()
	if err != nil {
		panic(err)
	}
	return b
}

// TestForwardIsCausal: changing later tokens of an example must not change
// the logits of earlier positions (no attention to the future).
func TestForwardIsCausal(t *testing.T) {
	p, err := NewPolicy(mustBackend(), tinyConfig(), 1)
	if err != nil {
		t.Fatal(err)
	}
	in := batchInput{B: 2, S: 6,
		Tokens:    []int32{2, 5, 6, 7, 8, 9, 2, 5, 6, 12, 13, 14},
		Positions: []int32{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5},
		Segments:  []int32{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
	}
	logits, _, err := p.Forward(in)
	if err != nil {
		t.Fatal(err)
	}
	V := p.Cfg.Vocab
	for pos := range 3 {
		for j := range V {
			a, b := logits[pos*V+j], logits[(6+pos)*V+j]
			if d := a - b; d > 1e-4 || d < -1e-4 {
				t.Fatalf("position %d sees later tokens: logit %d got %v, want %v", pos, j, a, b)
			}
		}
	}
}
