package train

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/ml/model"

	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/progress"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// SFTConfig is the config of `mlerl train sft`.
type SFTConfig struct {
	Data      string `yaml:"data" help:"data root: a local path or gs://bucket/prefix"`
	Examples  string `yaml:"examples" help:"sft_examples dataset in the data root (name or name/v<N>)"`
	Out       string `yaml:"out" help:"checkpoint folder inside the data root"`
	Tokenizer string `yaml:"tokenizer" help:"tokenizer: qwen (Qwen3 BPE) or bytes"`
	// VocabMinCount drops tokenizer ids seen fewer times (they become unk).
	VocabMinCount int         `yaml:"vocab_min_count" help:"keep tokenizer ids seen at least this often in the corpus"`
	Model         ModelConfig `yaml:"model"`
	Optim         OptimConfig `yaml:"optim"`
	Epochs        int         `yaml:"epochs" help:"passes over the held-in examples"`
	BatchRows     int         `yaml:"batch_rows" help:"packed rows of ctx tokens per update"`
	Seed          int64       `yaml:"seed" help:"seed for initialisation and data order"`
	// CheckpointEvery 0 saves at the end of every epoch only.
	CheckpointEvery int  `yaml:"checkpoint_every" help:"save a checkpoint every N updates (0: each epoch)"`
	MaxSteps        int  `yaml:"max_steps" help:"stop after N updates in total (0: run every epoch); a later run resumes"`
	Resume          bool `yaml:"resume" help:"continue from the latest checkpoint in out when there is one"`
	// Response selects what the policy learns to write (see TerseResponse).
	Response string `yaml:"response" help:"full (the expert's whole answer) or terse (the same action with one-word Reflection and Thought and a one-line Action Input: far fewer tokens for a small policy to learn)"`
}

// DefaultSFTConfig is the CPU demo: the demo model, 2 epochs (as the paper),
// a learning rate suited to training a small model from scratch (the
// paper's 2e-5 is for fine-tuning a pretrained 7B model).
func DefaultSFTConfig() SFTConfig {
	return SFTConfig{
		Data:          "./data",
		Examples:      schemas.SFTExamples.Name,
		Out:           "checkpoints/sft",
		Tokenizer:     "qwen",
		VocabMinCount: 1,
		Model:         DemoModelConfig(),
		Optim: OptimConfig{LR: 1e-3, MinLRRatio: 0.1, WarmupSteps: 20, WeightDecay: 0.01,
			Beta1: 0.9, Beta2: 0.95, ClipNorm: 1.0},
		Epochs:    2,
		BatchRows: 8,
		Seed:      1,
		Resume:    true,
		Response:  ResponseFull,
	}
}

// Validate checks every field, before anything is read or written.
func (c SFTConfig) Validate() error {
	tokMu.Lock()
	_, tokKnown := tokenizers[c.Tokenizer]
	toks := slices.Sorted(maps.Keys(tokenizers))
	tokMu.Unlock()
	switch {
	case c.Data == "":
		return config.Errorf("data", c.Data, "must name the data root (a folder or gs://bucket/prefix)")
	case c.Examples == "":
		return config.Errorf("examples", c.Examples, "must name the sft_examples dataset (name or name/vN)")
	case c.Out == "":
		return config.Errorf("out", c.Out, "must name a checkpoint folder in the data root")
	case !tokKnown:
		return config.Errorf("tokenizer", c.Tokenizer, "want one of %s", strings.Join(toks, ", "))
	case c.VocabMinCount < 1:
		return config.Errorf("vocab_min_count", c.VocabMinCount, "must be at least 1")
	case c.Model.Vocab != 0:
		return config.Errorf("model.vocab", c.Model.Vocab, "must be 0: the vocabulary is trimmed to the examples' tokens (see vocab_min_count)")
	case c.Model.Ctx > 0 && c.Model.Ctx < 64:
		// The shortest answer in the action format is ~20 Qwen tokens.
		return config.Errorf("model.ctx", c.Model.Ctx, "must be at least 64: a prompt and an answer in the action format do not fit in less")
	case c.Epochs < 1:
		return config.Errorf("epochs", c.Epochs, "must be at least 1")
	case c.BatchRows < 1:
		return config.Errorf("batch_rows", c.BatchRows, "must be at least 1")
	case c.CheckpointEvery < 0:
		return config.Errorf("checkpoint_every", c.CheckpointEvery, "must not be negative (0: each epoch)")
	case c.MaxSteps < 0:
		return config.Errorf("max_steps", c.MaxSteps, "must not be negative (0: every epoch)")
	case c.Response != ResponseFull && c.Response != ResponseTerse:
		return config.Errorf("response", c.Response, "want %s or %s", ResponseFull, ResponseTerse)
	}
	shape := c.Model
	shape.Vocab = NumSpecial // filled in from the trimmed vocabulary
	if err := config.Nest("model", shape.Validate()); err != nil {
		return err
	}
	return config.Nest("optim", c.Optim.Validate())
}

// sftState is the resumable position of an SFT run.
type sftState struct {
	Step  int `json:"step"`  // updates done
	Epoch int `json:"epoch"` // current epoch (0-based)
	Batch int `json:"batch"` // batches of the current epoch done
}

// encoded is one example as model ids: [BOS] prompt response [EOS];
// Response is the index of the first response token.
type encoded struct {
	Tokens   []int32
	Response int
}

// encodeExample tokenizes one (prompt, response) pair to fit ctx: a long
// prompt loses its beginning (BOS kept), then a still too long response
// loses its end (and its EOS).
func encodeExample(v *Vocab, tok Tokenizer, prompt, response string, ctx int) encoded {
	p := v.Encode(tok, prompt)
	r := append(v.Encode(tok, response), EosID)
	if len(r) > ctx-2 {
		r = r[:ctx-2]
	}
	if room := ctx - 1 - len(r); len(p) > room {
		p = p[len(p)-room:]
	}
	toks := make([]int32, 0, 1+len(p)+len(r))
	toks = append(append(append(toks, BosID), p...), r...)
	return encoded{Tokens: toks, Response: 1 + len(p)}
}

// packedBatch is a batch of packed rows with next-token targets and loss
// weights (1 where the target is a response token, else 0).
type packedBatch struct {
	batchInput
	Targets []int32
	Weights []float32
	// Real counts non-padding tokens; Targets counts weighted targets.
	Real, NumTargets int
	// Starts holds each example's first flat index, by position in the
	// packing order.
	Starts []int
}

// packWindow is how many of the latest rows packBatches tries to fit an
// example into.
const packWindow = 64

// packBatches packs the examples, in order, into rows of at most ctx
// tokens (each example goes to the first of the last packWindow rows with
// room, else starts a row) and groups rows into batches. A batch's width is its longest row
// rounded up to a multiple of 32, so padding is only each row's tail.
// Attention stays inside an example through the segment ids and
// per-example positions (see batchInput).
func packBatches(exs []encoded, order []int, rowsPerBatch, ctx int) []packedBatch {
	var rows [][]int // positions in order, per row
	var used []int
	for oi := range order {
		n := len(exs[order[oi]].Tokens)
		placed := false
		// First fit among the most recent rows: fills the tails that a
		// purely sequential packing leaves (31% padding on the benchmark
		// data) while keeping the epoch's order roughly intact.
		for r := max(0, len(rows)-packWindow); r < len(rows); r++ {
			if used[r]+n <= ctx {
				rows[r], used[r], placed = append(rows[r], oi), used[r]+n, true
				break
			}
		}
		if !placed {
			rows, used = append(rows, []int{oi}), append(used, n)
		}
	}
	var out []packedBatch
	for start := 0; start < len(rows); start += rowsPerBatch {
		group := rows[start:min(start+rowsPerBatch, len(rows))]
		width := 0
		for _, r := range group {
			n := 0
			for _, oi := range r {
				n += len(exs[order[oi]].Tokens)
			}
			width = max(width, n)
		}
		width = min(ctx, (width+31)/32*32)
		b := packedBatch{batchInput: batchInput{B: len(group), S: width}}
		size := b.B * b.S
		b.Tokens, b.Positions, b.Segments = make([]int32, size), make([]int32, size), make([]int32, size)
		b.Targets, b.Weights = make([]int32, size), make([]float32, size)
		b.Starts = make([]int, len(order))
		for ri, r := range group {
			at := ri * width
			for si, oi := range r {
				e := exs[order[oi]]
				b.Starts[oi] = at
				for t, tok := range e.Tokens {
					k := at + t
					b.Tokens[k], b.Positions[k], b.Segments[k] = tok, int32(t), int32(si+1)
					if t+1 < len(e.Tokens) {
						b.Targets[k] = e.Tokens[t+1]
						if t+1 >= e.Response {
							b.Weights[k] = 1
							b.NumTargets++
						}
					}
				}
				at += len(e.Tokens)
				b.Real += len(e.Tokens)
			}
		}
		out = append(out, b)
	}
	return out
}

// compactTargets lists the weighted targets of a batch: their flat
// indices, target ids and weights, padded with weight 0 to a multiple of
// 64 (few compiled shapes).
func (b packedBatch) compactTargets() (idx, targets []int32, weights []float32) {
	k := max(64, (b.NumTargets+63)/64*64)
	idx, targets, weights = make([]int32, k), make([]int32, k), make([]float32, k)
	j := 0
	for i, w := range b.Weights {
		if w != 0 {
			idx[j], targets[j], weights[j] = int32(i), b.Targets[i], w
			j++
		}
	}
	return idx, targets, weights
}

func (b packedBatch) inputs() []any {
	idx, targets, weights := b.compactTargets()
	k := len(idx)
	return append(b.tensors(), i32Tensor(idx, k), i32Tensor(targets, k), f32Tensor(weights, k))
}

// sftLoss is the mean next-token negative log-likelihood over response
// tokens; the LM head runs only at those positions. Inputs: tokens,
// positions, segments [B,S]; target indices, targets, weights [K].
func (p *Policy) sftLoss(scope *model.Scope, in []*Node) (*Node, []*Node) {
	h := gatherRows(p.trunk(scope, in[0], in[1], in[2]), in[3])
	logits, _ := p.heads(scope, h)
	logp, _ := tokenLogProbs(logits, in[4])
	w := in[5]
	n := Max(ReduceAllSum(w), OnesLike(ReduceAllSum(w)))
	return Div(Neg(ReduceAllSum(Mul(w, logp))), n), nil
}

// epochOrder is the example order of an epoch: a permutation drawn from
// (seed, epoch) alone, so a resumed run packs the same batches.
func epochOrder(n int, seed int64, epoch int) []int {
	r := rand.New(rand.NewPCG(uint64(seed), uint64(epoch)+1))
	return r.Perm(n)
}

// afterSFTStep, when set (tests only), is called after every update; the
// kill test SIGKILLs its own process from it.
var afterSFTStep func(step int)

// RunSFT is `mlerl train sft`: it reads sft_examples, builds (or resumes)
// the vocabulary and policy, trains on held-in examples with packed
// batches and validates on held-out ones each epoch, writing checkpoints
// and metrics to cfg.Out in the data root.
func RunSFT(ctx context.Context, cfg SFTConfig) error {
	return runSFT(ctx, cfg, os.Stderr)
}

func runSFT(ctx context.Context, cfg SFTConfig, log io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("train sft: %w", err)
	}
	st, err := store.Open(ctx, cfg.Data)
	if err != nil {
		return fmt.Errorf("train sft: %w", err)
	}
	m, err := datasets.ResolveIn(ctx, st, cfg.Examples)
	if err != nil {
		return fmt.Errorf("train sft: %w (run `mlerl dataset` first)", err)
	}
	rows, err := datasets.ReadAll[schemas.SFTExample](ctx, st, m, schemas.SFTExamples)
	if err != nil {
		return fmt.Errorf("train sft: %w", err)
	}
	var train, val []schemas.SFTExample
	for i, r := range rows {
		if cfg.Response == ResponseTerse {
			r.Response = TerseResponse(r.Response)
		}
		switch r.Split {
		case schemas.HeldIn:
			train = append(train, r)
		case schemas.HeldOut:
			val = append(val, r)
		default:
			return fmt.Errorf("train sft: %s row %d (example %q): split %q is neither %q nor %q; fix the dataset stage", m.URI, i, r.ExampleID, r.Split, schemas.HeldIn, schemas.HeldOut)
		}
	}
	if len(train) == 0 {
		return fmt.Errorf("train sft: %s has no %s examples to train on", m.URI, schemas.HeldIn)
	}
	tok, err := OpenTokenizer(cfg.Tokenizer)
	if err != nil {
		return fmt.Errorf("train sft: %w", err)
	}
	backend, err := NewBackend()
	if err != nil {
		return fmt.Errorf("train sft: backend: %w", err)
	}

	// Resume or start.
	var (
		p       *Policy
		vocab   *Vocab
		state   sftState
		metrics []string
	)
	latest := ""
	if cfg.Resume {
		if latest, err = LatestCheckpoint(ctx, st, cfg.Out); err != nil {
			return fmt.Errorf("train sft: %w", err)
		}
	}
	if latest != "" {
		var ck *Checkpoint
		if p, ck, err = LoadCheckpoint(ctx, st, latest, backend, LoadOptions{}, nil, &state); err != nil {
			return fmt.Errorf("train sft: resuming: %w", err)
		}
		vocab, metrics = ck.Vocab, ck.Metrics
		if ck.Model.Layers != cfg.Model.Layers || ck.Model.DModel != cfg.Model.DModel {
			return fmt.Errorf("train sft: %s holds a %dx%d model but the config asks for %dx%d; use another out folder or resume=false", st.URI(latest), ck.Model.Layers, ck.Model.DModel, cfg.Model.Layers, cfg.Model.DModel)
		}
		fmt.Fprintf(log, "train sft: resuming from %s at step %d (epoch %d, batch %d)\n", st.URI(latest), state.Step, state.Epoch, state.Batch)
	} else {
		texts := make([]string, 0, 2*len(train))
		for _, r := range train {
			texts = append(texts, r.Prompt, r.Response)
		}
		vocab = BuildVocab(tok, texts, cfg.VocabMinCount)
		mc := cfg.Model
		mc.Vocab = vocab.Size()
		if p, err = NewPolicy(backend, mc, cfg.Seed); err != nil {
			return fmt.Errorf("train sft: %w", err)
		}
	}
	cfg.Model = p.Cfg

	encode := func(rs []schemas.SFTExample) []encoded {
		out := make([]encoded, len(rs))
		for i, r := range rs {
			out[i] = encodeExample(vocab, tok, r.Prompt, r.Response, p.Cfg.Ctx)
		}
		return out
	}
	trainEx, valEx := encode(train), encode(val)
	epochs := make([][]packedBatch, cfg.Epochs)
	total := 0
	for e := range epochs {
		epochs[e] = packBatches(trainEx, epochOrder(len(trainEx), cfg.Seed, e), cfg.BatchRows, p.Cfg.Ctx)
		total += len(epochs[e])
	}
	identity := make([]int, len(valEx))
	for i := range identity {
		identity[i] = i
	}
	valBatches := packBatches(valEx, identity, cfg.BatchRows, p.Cfg.Ctx)
	fmt.Fprintf(log, "train sft: %d held-in examples, %d held-out, vocab %d, model %d params, %d updates\n",
		len(trainEx), len(valEx), vocab.Size(), p.Cfg.NumParams(), total)
	if len(valEx) == 0 {
		fmt.Fprintf(log, "train sft: %s has no %s examples: no validation loss (the dataset stage decides which tasks are held out)\n", m.URI, schemas.HeldOut)
	}

	l, err := newLearner(p, cfg.Optim, p.sftLoss)
	if err != nil {
		return fmt.Errorf("train sft: %w", err)
	}
	save := func() error {
		sb, _ := json.Marshal(state)
		return SaveCheckpoint(ctx, st, cfg.Out, state.Step, p, Checkpoint{Config: cfg, Model: p.Cfg, Vocab: vocab, State: sb, Metrics: metrics})
	}
	record := func(m map[string]any) {
		b, _ := json.Marshal(m)
		metrics = append(metrics, string(b)+"\n")
	}
	bar := progress.New("train sft", total)
	bar.Add(state.Step, "")
	for state.Epoch < cfg.Epochs {
		batches := epochs[state.Epoch]
		for state.Batch < len(batches) {
			if err := ctx.Err(); err != nil {
				return err
			}
			if cfg.MaxSteps > 0 && state.Step >= cfg.MaxSteps {
				if err := save(); err != nil {
					return fmt.Errorf("train sft: %w", err)
				}
				fmt.Fprintf(log, "train sft: stopped at max_steps %d; run again to resume\n", cfg.MaxSteps)
				return nil
			}
			b := batches[state.Batch]
			lr := cfg.Optim.LRAt(state.Step, total)
			start := time.Now()
			loss, norm, _, err := l.Step(b.inputs(), lr)
			if err != nil {
				return fmt.Errorf("train sft: update %d: %w", state.Step, err)
			}
			secs := time.Since(start).Seconds()
			state.Step++
			state.Batch++
			record(map[string]any{"stage": "sft", "step": state.Step, "epoch": state.Epoch,
				"losses/sft": loss, "charts/lr": lr, "charts/grad_norm": norm,
				"charts/tokens_per_s": float64(b.Real) / secs,
				"charts/pad_fraction": 1 - float64(b.Real)/float64(b.B*b.S)})
			bar.Add(1, fmt.Sprintf("loss %.3f", loss))
			if cfg.CheckpointEvery > 0 && state.Step%cfg.CheckpointEvery == 0 {
				if err := save(); err != nil {
					return fmt.Errorf("train sft: %w", err)
				}
			}
			if afterSFTStep != nil {
				afterSFTStep(state.Step)
			}
		}
		if len(valBatches) > 0 {
			sum, n := 0.0, 0
			for _, b := range valBatches {
				loss, _, err := l.Eval(b.inputs())
				if err != nil {
					return fmt.Errorf("train sft: validation: %w", err)
				}
				sum += loss * float64(b.NumTargets)
				n += b.NumTargets
			}
			val := sum / float64(max(n, 1))
			record(map[string]any{"stage": "sft", "step": state.Step, "epoch": state.Epoch, "losses/val": val})
			fmt.Fprintf(log, "train sft: epoch %d: validation loss %.4f on %d held-out response tokens\n", state.Epoch, val, n)
		}
		state.Epoch++
		state.Batch = 0
		if err := save(); err != nil {
			return fmt.Errorf("train sft: %w", err)
		}
	}
	bar.Done()
	fmt.Fprintf(log, "train sft: done, checkpoint %s\n", st.URI(cfg.Out))
	return nil
}
