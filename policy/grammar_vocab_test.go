package policy

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/internal/tokenizer"
	"github.com/mlerl/mlerl/policy/hf"
)

// Constrained decoding over a whole pretrained vocabulary: the real Qwen3
// tokenizer's 151,669 ids (in 151,936 embedding rows, as Qwen3 has), as a
// Hugging Face policy uses it (model ids are tokenizer ids).

// qwenVocabPolicy is the Qwen3 tokenizer as a Hugging Face policy's
// vocabulary (no weights: the grammar needs only the tokens), with
// Qwen's end of turn and stop ids; it skips without the tokenizer.
func qwenVocabPolicy(t testing.TB) *Policy {
	t.Helper()
	tok, err := tokenizer.Default()
	if err != nil {
		t.Skipf("Qwen tokenizer not installed (make setup): %v", err)
	}
	eot, _ := tok.ID("<|im_end|>")
	eos, _ := tok.ID("<|endoftext|>")
	p := &Policy{Model: Config{Vocab: 151936, Ctx: 4096, PromptTokens: 16, ResponseTokens: 160},
		Source: &Source{Kind: KindHF}, tok: tok, hf: &hf.Checkpoint{Tokenizer: tok}, eos: int32(eot)}
	p.setStops([]int{eos})
	return p
}

// fullVocabWorld is grammarWorld's task state with the whole Qwen3
// vocabulary.
func fullVocabWorld(t testing.TB) grammarWorld {
	t.Helper()
	w := newGrammarWorld(t)
	p := qwenVocabPolicy(t)
	w.gen = Generator{Engine: &randomEngine{cfg: p.Model}, Policy: p}
	return w
}

// naiveMask is the mask by definition: every id whose bytes the automaton
// accepts from s (EOS once complete).
func naiveMask(c *actionConstraint, n int) Bitset {
	m := NewBitset(n)
	if c.g.done(&c.s) {
		m.Set(c.p.EOS())
		return m
	}
	for id, b := range c.t.bytes {
		if len(b) == 0 {
			continue
		}
		s, ok := c.s, true
		for _, x := range b {
			if ok = c.g.step(&s, x); !ok {
				break
			}
		}
		if ok {
			m.Set(int32(id))
		}
	}
	return m
}

// TestFullVocabularyMasks: over Qwen3's 151k ids, the masks along
// constrained responses (sampled under random logits, both answer forms)
// equal the mask by definition, the precomputed free-text tokens
// included (every step outside free text, every 8th inside it, where one
// cached mask serves the whole stretch), and every response parses as an
// action and ends with the chat format's end of turn.
func TestFullVocabularyMasks(t *testing.T) {
	if testing.Short() {
		t.Skip("walks Qwen's whole vocabulary at every step")
	}
	w := fullVocabWorld(t)
	p := w.gen.Policy
	for _, oneLine := range []bool{true, false} {
		samples := w.constrainedSamples(t, 5, 1, oneLine, 1)
		gc := NewGrammarContext(w.state, nil, oneLine)
		for i, s := range samples {
			text := p.Decode(s.Tokens)
			if _, err := env.Parse(text); err != nil {
				t.Fatalf("sample %d does not parse: %v\n%s", i, err, text)
			}
			if !s.Stopped || s.Tokens[len(s.Tokens)-1] != p.EOS() {
				t.Fatalf("sample %d did not end with the end of turn: %q", i, text)
			}
			c := w.gen.ActionGrammar(gc).(*actionConstraint)
			for k, tok := range s.Tokens {
				got := NewBitset(p.Size())
				if err := c.Allowed(got, 1<<20); err != nil {
					t.Fatal(err)
				}
				if c.InFreeText() && k%8 != 0 {
					// checked at every 8th step of free text
				} else if want := naiveMask(c, p.Size()); !slices.Equal(got, want) {
					t.Fatalf("sample %d token %d (after %q): the mask has %d ids, the definition %d", i, k, c.text, got.Count(), want.Count())
				}
				if !got.Has(tok) {
					t.Fatalf("sample %d token %d %q is outside its own mask", i, k, p.TokenBytes(tok))
				}
				if err := c.Accept(tok); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// BenchmarkGrammarMaskQwen3 measures constrained decoding's grammar work
// per generated token over Qwen3's whole vocabulary (151,669 ids with
// text in 151,936 rows): following a response token by token as the
// policy writes it, each step's mask (the precomputed free-text tokens
// and a walk of the rest inside free text; the trie walk at choices,
// literals and numbers), the forced tokens (tokenising the completion)
// and the automaton's step. Every step computes a mask here, also where
// generation would jump forward, so it bounds the cost from above. terse
// is what a terse SFT policy writes (an edit with one of the task's
// ideas), full an answer with free-text Reflection and Thought. sample
// is the sampler's log-softmax and draw over 151,936 logits under a mask,
// per row and token (not the grammar's: the price of the vocabulary's
// size itself). The log says how long the tables took to build, once.
func BenchmarkGrammarMaskQwen3(b *testing.B) {
	p := qwenVocabPolicy(b)
	t0 := time.Now()
	p.tables()
	b.Logf("the tables of %d ids took %v to build (once per vocabulary)", p.Size(), time.Since(t0).Round(time.Millisecond))
	w := newGrammarWorld(b)
	idea := NewGrammarContext(w.state, nil, true).Ideas[0]
	responses := map[string]struct {
		text    string
		oneLine bool
	}{
		"terse": {"Reflection: -\nThought: -\nAction: Edit Script (AI)\nAction Input: {\"script_name\": \"train.py\", \"edit_instruction\": " + jsonQuote(idea) + ", \"save_name\": \"train.py\"}", true},
		"full": {"Reflection: The last run reached a validation accuracy of 0.9444, close to the best so far; the model may be underfitting the wine features.\n" +
			"Thought: Run the edited script to measure whether the scaled features help the logistic regression.\n" +
			"Action: Execute Script\nAction Input: {\n    \"script_name\": \"train.py\"\n}", false},
	}
	for _, name := range []string{"terse", "full"} {
		r := responses[name]
		b.Run(name, func(b *testing.B) {
			toks, err := p.Encode(r.text)
			if err != nil {
				b.Fatal(err)
			}
			gc := NewGrammarContext(w.state, nil, r.oneLine)
			gen := Generator{Policy: p}
			mask := NewBitset(p.Size())
			b.ResetTimer()
			for range b.N {
				c := gen.ActionGrammar(gc)
				for k, tok := range toks {
					if _, err := c.Forced(160 - k); err != nil {
						b.Fatal(err)
					}
					clear(mask)
					if err := c.Allowed(mask, 160-k); err != nil {
						b.Fatal(err)
					}
					if !mask.Has(tok) {
						b.Fatalf("token %d %q is not allowed after %q", k, p.TokenBytes(tok), p.Decode(toks[:k]))
					}
					if err := c.Accept(tok); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*len(toks)), "grammar-µs/token")
			b.ReportMetric(float64(len(toks)), "tokens")
		})
	}
	b.Run("sample", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(1, 2))
		logits := make([]float32, p.Size())
		for i := range logits {
			logits[i] = float32(rng.NormFloat64())
		}
		var smp sampler
		opts := GenerateOptions{Temperature: 1}
		b.ResetTimer()
		for range b.N {
			smp.prepare(logits, p.FreeMask(), opts)
			smp.draw(rng)
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/token")
	})
}
