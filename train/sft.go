package train

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/internal/catalog"
	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/progress"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

// SFTConfig is the config of `mlerl train sft`.
type SFTConfig struct {
	Data     string `yaml:"data" help:"data root: a local path or gs://bucket/prefix"`
	Examples string `yaml:"examples" help:"sft_examples dataset in the data root (name or name/v<N>)"`
	Out      string `yaml:"out" help:"checkpoint folder inside the data root"`
	// Policy is what trains: mlerl's own model from scratch, or a
	// Hugging Face checkpoint folder or GGUF file fine-tuned
	// (policy.ParseSpec).
	Policy string `yaml:"policy" help:"the policy to train: mlerl (mlerl's own model, from scratch on a trimmed vocabulary) hf:DIR (a Hugging Face checkpoint folder of a Llama, Qwen2 or Qwen3 model: its tokenizer, chat format and weights, fine-tuned with LoRA unless full_finetune) or gguf:FILE (a GGUF model file of one, e.g. SmolLM2's, run as the Hugging Face model it converts to)"`
	// Adapter is a PEFT adapter a Hugging Face policy starts from.
	Adapter string `yaml:"adapter" help:"with policy hf:DIR or gguf:FILE: a PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors) to start from, e.g. one LLaMA-Factory trained (empty: fresh adapters)"`
	// Tuning: LoRA or full fine-tuning, base storage, recomputation.
	Tuning policy.Tuning `yaml:",inline"`
	// SaveMerged writes the trained policy as a Hugging Face folder.
	SaveMerged string `yaml:"save_merged" help:"with policy hf:DIR or gguf:FILE: a local folder (new, empty, or this run's own from an earlier or resumed run) to write the trained model into at the end, adapters merged, as a Hugging Face checkpoint transformers and vLLM load (empty: none; every checkpoint holds the PEFT adapter either way; mlerl export gguf writes a GGUF file)"`
	Tokenizer  string `yaml:"tokenizer" help:"mlerl's model: tokenizer qwen (Qwen3 BPE) or bytes (a Hugging Face policy uses its folder's tokenizer.json)"`
	// VocabMinCount drops corpus ids seen fewer times (they are spelled
	// with byte tokens instead).
	VocabMinCount int                `yaml:"vocab_min_count" help:"keep corpus tokens seen at least this often (rarer ones are spelled with byte tokens)"`
	Model         policy.Config      `yaml:"model"`
	Optim         policy.OptimConfig `yaml:"optim"`
	Engine        string             `yaml:"engine" help:"native (the CPU engine) or gomlx (GoMLX; XLA on a GPU with GOMLX_BACKEND=xla:cuda)"`
	Epochs        int                `yaml:"epochs" help:"passes over the held-in examples"`
	BatchRows     int                `yaml:"batch_rows" help:"packed rows of ctx tokens per update"`
	Seed          int64              `yaml:"seed" help:"seed for initialisation and data order"`
	// CheckpointEvery 0 saves at the end of every epoch only.
	CheckpointEvery int  `yaml:"checkpoint_every" help:"save a checkpoint every N updates (0: each epoch)"`
	MaxSteps        int  `yaml:"max_steps" help:"stop after N updates in total (0: run every epoch); a later run resumes (save_merged is written with the model it stopped at)"`
	Resume          bool `yaml:"resume" help:"continue from the latest checkpoint in out when there is one"`
	// Response selects what the policy learns to write (see TerseResponse).
	Response string `yaml:"response" help:"terse (the expert's action with one-word Reflection and Thought and a one-line Action Input: what a small policy can learn) or full (the expert's whole answer)"`
	// ActionWeight weights the response tokens that write the action's
	// name (actionSpan) against 1 for the others: the per-token mean loss
	// otherwise gives the one decision of a terse response (which tool,
	// e.g. keep an edit or undo it) 1/30-1/100 of an example's weight.
	ActionWeight float64 `yaml:"action_weight" help:"loss weight of the response tokens that write the action's name (the decision among the tools), against 1 for every other response token (1: no extra weight; e.g. 5 for a pretrained policy whose loss is mostly the answer format); losses/sft_action logs their loss either way"`
	// Matmul is the precision of the training products (policy.SetMatmul).
	Matmul string `yaml:"matmul" help:"precision of the training matrix products: auto (bf16 where the CPU's bf16 products outrun float32: AMX tiles, or AMD's AVX512_BF16; else fp32; the printed config shows what it resolved to), fp32, or bf16 (native engine; float32 weights and optimizer state either way)"`
}

// DefaultSFTConfig is the CPU demo: the demo model on the native engine,
// 2 epochs (as the paper), terse responses, a learning rate suited to
// training a small model from scratch (the paper's 2e-5 is for
// fine-tuning a pretrained 7B model).
func DefaultSFTConfig() SFTConfig {
	return SFTConfig{
		Data:          "./data",
		Examples:      schemas.SFTExamples.Name,
		Out:           "checkpoints/sft",
		Policy:        policy.KindMLERL,
		Tuning:        policy.DefaultTuning(),
		Tokenizer:     policy.TokenizerQwen,
		VocabMinCount: 1,
		Model:         policy.DemoConfig(),
		Optim: policy.OptimConfig{LR: 1e-3, MinLRRatio: 0.1, WarmupSteps: 20, WeightDecay: 0.01,
			Beta1: 0.9, Beta2: 0.95, ClipNorm: 1.0},
		Engine:    policy.EngineNative,
		Matmul:    policy.MatmulAuto,
		Epochs:    2,
		BatchRows: 8,
		Seed:      1,
		Resume:    true,
		Response:  policy.ResponseTerse,

		ActionWeight: 1,
	}
}

// Derive resolves the keys whose auto depends on the CPU, matmul and
// base_storage, to what they mean on this machine (config.Deriver;
// policy.ResolveMatmul, policy.ResolvePrecision), so that the config the
// stage prints and every checkpoint's config.json say what ran. A value
// that does not resolve is left for Validate, and the run, to refuse.
func (c *SFTConfig) Derive() { _ = c.resolvePrecision() }

// resolvePrecision resolves matmul (for the engine) and the tuning's
// base_storage: the one place train sft decides them.
func (c *SFTConfig) resolvePrecision() error {
	t, terr := c.Tuning.ResolvedForEngine(c.Policy, c.Engine)
	if terr == nil {
		c.Tuning = t
	}
	mm, err := policy.ResolveMatmul(c.Engine, c.Matmul)
	if err != nil {
		return config.Errorf("matmul", c.Matmul, "%v", err)
	}
	c.Matmul = mm
	return terr
}

// Validate checks the config, each failure one line naming the key.
func (c SFTConfig) Validate() error {
	switch {
	case c.Data == "":
		return config.Errorf("data", c.Data, "must name the data root (a folder or gs://bucket/prefix)")
	case c.Examples == "":
		return config.Errorf("examples", c.Examples, "must name the sft_examples dataset (name or name/vN)")
	case c.Out == "":
		return config.Errorf("out", c.Out, "must name a checkpoint folder in the data root")
	case c.Tokenizer != policy.TokenizerQwen && c.Tokenizer != policy.TokenizerBytes:
		return config.Errorf("tokenizer", c.Tokenizer, "want one of %s, %s", policy.TokenizerBytes, policy.TokenizerQwen)
	case c.VocabMinCount < 1:
		return config.Errorf("vocab_min_count", c.VocabMinCount, "must be at least 1")
	case c.Model.Vocab != 0:
		return config.Errorf("model.vocab", c.Model.Vocab, "must be 0: the vocabulary is trimmed to the examples' tokens (see vocab_min_count)")
	case c.Engine != policy.EngineNative && c.Engine != policy.EngineGoMLX:
		return config.Errorf("engine", c.Engine, "want %s or %s", policy.EngineNative, policy.EngineGoMLX)
	case c.Epochs < 1:
		return config.Errorf("epochs", c.Epochs, "must be at least 1")
	case c.BatchRows < 1:
		return config.Errorf("batch_rows", c.BatchRows, "must be at least 1")
	case c.CheckpointEvery < 0:
		return config.Errorf("checkpoint_every", c.CheckpointEvery, "must not be negative (0: each epoch)")
	case c.MaxSteps < 0:
		return config.Errorf("max_steps", c.MaxSteps, "must not be negative (0: every epoch)")
	case !(c.ActionWeight > 0) || math.IsInf(c.ActionWeight, 0):
		return config.Errorf("action_weight", c.ActionWeight, "must be a positive number (1: the action's tokens weigh as every other response token)")
	case c.Response != policy.ResponseFull && c.Response != policy.ResponseTerse:
		return config.Errorf("response", c.Response, "want %s or %s", policy.ResponseFull, policy.ResponseTerse)
	case c.Matmul != "" && c.Matmul != policy.MatmulAuto && c.Matmul != policy.MatmulFP32 && c.Matmul != policy.MatmulBF16:
		return config.Errorf("matmul", c.Matmul, "want %s, %s or %s", policy.MatmulAuto, policy.MatmulFP32, policy.MatmulBF16)
	case c.Matmul == policy.MatmulBF16 && c.Engine != policy.EngineNative:
		return config.Errorf("matmul", c.Matmul, "bf16 products are the %s engine's (engine is %s): use auto or fp32", policy.EngineNative, c.Engine)
	}
	if err := validatePolicy(c.Policy, c.Adapter, c.SaveMerged, c.Tuning, false); err != nil {
		return err
	}
	if policy.Pretrained(c.Policy) {
		if err := hfShapeUnset(c.Model, DefaultSFTConfig().Model); err != nil {
			return err
		}
		if c.Tokenizer != DefaultSFTConfig().Tokenizer {
			return config.Errorf("tokenizer", c.Tokenizer, "is mlerl's model's: a Hugging Face policy uses its folder's tokenizer.json (drop the key)")
		}
	}
	if err := config.Nest("model", c.Model.Validate()); err != nil {
		return err
	}
	return config.Nest("optim", c.Optim.Validate())
}

// sftState is the resumable position of an SFT run.
type sftState struct {
	Step  int `json:"step"`  // updates done
	Epoch int `json:"epoch"` // current epoch (0-based)
	Batch int `json:"batch"` // batches of the current epoch done
	// Validated is the update the last validation ran after (0: none), so
	// that a run stopped at max_steps and run again validates once.
	Validated int `json:"validated,omitempty"`
}

// encodeExample tokenizes one (prompt, response) pair by the policy's
// one rule: the prompt fitted to prompt_tokens (BOS first for mlerl's
// model, chat-rendered for a Hugging Face one), then the response and
// its EOS cut to response_tokens.
func encodeExample(pol *policy.Policy, prompt, response string) (encoded, error) {
	p, err := pol.EncodePrompt(prompt)
	if err != nil {
		return encoded{}, err
	}
	r, err := pol.EncodeResponse(response)
	if err != nil {
		return encoded{}, err
	}
	e := encoded{Tokens: append(p, r...), Response: len(p)}
	if start, end, ok := actionSpan(pol, response, r); ok {
		e.Act = [2]int{len(p) + start, len(p) + end}
	}
	return e, nil
}

// actionSpan finds the tokens of ids (a response's, as EncodeResponse
// wrote them) that write the action's name: the text after "Action:" to
// the end of its line. The response's text up to the name and up to the
// line's end are encoded alone; the span lies between, when both are
// prefixes of ids (a tokenizer whose tokens cross either boundary gives
// none: the example then has no action span).
func actionSpan(pol *policy.Policy, response string, ids []int32) (start, end int, ok bool) {
	key := env.FieldAction + ":"
	at := 0
	if !strings.HasPrefix(response, key) {
		i := strings.Index(response, "\n"+key)
		if i < 0 {
			return 0, 0, false
		}
		at = i + 1
	}
	name := at + len(key)
	line := len(response)
	if j := strings.IndexByte(response[name:], '\n'); j >= 0 {
		line = name + j
	}
	if strings.TrimSpace(response[name:line]) == "" {
		return 0, 0, false
	}
	before, err := pol.Encode(response[:name])
	if err != nil || !slices.Equal(before, ids[:min(len(before), len(ids))]) {
		return 0, 0, false
	}
	through, err := pol.Encode(response[:line])
	if err != nil || len(through) > len(ids) || !slices.Equal(through, ids[:len(through)]) || len(through) <= len(before) {
		return 0, 0, false
	}
	return len(before), len(through), true
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
// and metrics to cfg.Out in the data root. Stopped by a signal, it saves
// the current position and returns one line saying how to resume.
func RunSFT(ctx context.Context, cfg SFTConfig) error {
	return runSFT(ctx, cfg, os.Stderr)
}

func runSFT(ctx context.Context, cfg SFTConfig, log io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("train sft: %w", err)
	}
	if err := cfg.resolvePrecision(); err != nil {
		return fmt.Errorf("train sft: %w", err)
	}
	s, train, val, err := openStage(ctx, "train sft", cfg.Data, cfg.Examples, schemas.SFTExamples,
		func(r schemas.SFTExample) string { return r.Split }, log)
	if err != nil {
		return err
	}
	if cfg.Response == policy.ResponseTerse {
		for _, rs := range [][]schemas.SFTExample{train, val} {
			for i := range rs {
				rs[i].Response = TerseResponse(rs[i].Response)
			}
		}
	}
	if err := s.mergedTargetFree(cfg.SaveMerged, cfg.Out); err != nil {
		return fmt.Errorf("train sft: %w", err)
	}
	var state sftState
	pol, ck, err := sftStart(ctx, s, cfg, train, &state)
	if err != nil {
		return err
	}
	defer pol.Close()
	eng, err := s.engine(ck, pol, cfg.Engine, cfg.Optim, uint64(cfg.Seed))
	if err != nil {
		return fmt.Errorf("train sft: %w", err)
	}
	defer eng.Close()
	matmul, err := policy.SetMatmul(eng, cfg.Matmul)
	if err != nil {
		return fmt.Errorf("train sft: %w", err)
	}
	cfg.Matmul = matmul // resolved above: the checkpoints record what ran, fp32 or bf16
	cfg.Model = eng.Config()
	pol.Model = cfg.Model
	if cfg.Model.LoRA != nil {
		// A resumed run keeps the storage its model.json recorded,
		// whatever auto means on this machine: config.json says so too.
		cfg.Tuning.BaseStorage = cfg.Model.BaseStorage
	}

	encode := func(rs []schemas.SFTExample) ([]encoded, int, error) {
		return encodeExamples(pol, s.input.URI, rs)
	}
	trainEx, refit, err := encode(train)
	if err != nil {
		return err
	}
	valEx, _, err := encode(val)
	if err != nil {
		return err
	}
	weighActions(trainEx, cfg.ActionWeight, log)
	epochs, valBatches, total := packSFT(trainEx, valEx, cfg)
	fmt.Fprintf(log, "train sft: %d held-in examples, %d held-out, vocab %d, model %s on the %s engine (%s products), %d updates\n",
		len(trainEx), len(valEx), pol.Size(), describeModel(pol), eng.Name(), matmul, total)
	if refit > 0 {
		fmt.Fprintf(log, "train sft: %d of %d prompts were longer than model.prompt_tokens %d and lost their oldest history lines\n", refit, len(trainEx), cfg.Model.PromptTokens)
	}
	if len(valEx) == 0 {
		fmt.Fprintf(log, "train sft: %s has no %s examples: no validation loss (the dataset stage decides which tasks are held out)\n", s.input.URI, schemas.HeldOut)
	}

	save := func() error { return s.save(ctx, cfg.Out, state.Step, eng, cfg, pol, state) }
	bar := progress.New("train sft", total)
	bar.Resume(state.Step)
	for state.Epoch < cfg.Epochs {
		batches := epochs[state.Epoch]
		for state.Batch < len(batches) {
			if ctx.Err() != nil {
				if err := save(); err != nil {
					return err
				}
				return s.interrupted(ctx, fmt.Sprintf("at update %d of %d", state.Step, total), cfg.Out)
			}
			if cfg.MaxSteps > 0 && state.Step >= cfg.MaxSteps {
				// Stopped inside an epoch: the model it leaves is validated
				// as an epoch's end would be.
				if len(valBatches) > 0 && state.Validated != state.Step {
					if err := validateSFT(s, eng, valBatches, cfg.Model.Vocab, &state, log); err != nil {
						return err
					}
				}
				if err := save(); err != nil {
					return err
				}
				fmt.Fprintf(log, "train sft: stopped at max_steps %d; run again to resume\n", cfg.MaxSteps)
				// The merged folder holds the model as it stands: a user who
				// stops at max_steps asked for this model, and a resumed run
				// replaces the folder with its own (mergedTargetFree).
				if cfg.SaveMerged != "" {
					fmt.Fprintf(log, "train sft: save_merged: writing the model at update %d of %d (a resumed run replaces it)\n", state.Step, total)
				}
				return s.saveMerged(pol, eng, cfg.SaveMerged, cfg.Out)
			}
			b := batches[state.Batch]
			idx, targets, weights, act := b.targets()
			lr := cfg.Optim.LRAt(state.Step, total)
			start := time.Now()
			var actNLL actionNLL
			loss, norm, err := eng.TrainStep(b.Batch, idx, sftLossStats(targets, weights, act, cfg.Model.Vocab, &actNLL), lr)
			if err != nil {
				return fmt.Errorf("train sft: update %d: %w", state.Step, err)
			}
			secs := time.Since(start).Seconds()
			state.Step++
			state.Batch++
			rec := map[string]any{"stage": "sft", "step": state.Step, "epoch": state.Epoch,
				"losses/sft": loss, "charts/lr": lr, "charts/grad_norm": norm,
				"charts/tokens_per_s": float64(b.Real) / secs,
				"charts/pad_fraction": 1 - float64(b.Real)/float64(b.B*b.S)}
			if actNLL.N > 0 {
				rec["losses/sft_action"], rec["charts/action_accuracy"] = actNLL.Mean(), actNLL.Accuracy()
			}
			if pol.Kind() == policy.KindHF {
				rec["time/step_s"], rec["memory/peak_rss_gib"] = secs, peakRSSGiB()
				fmt.Fprintf(log, "train sft: update %d: loss %.4f (action names %.4f, %d of %d right), %.1f s, %.0f real tokens/s, peak RSS %.2f GiB\n", state.Step, loss, actNLL.Mean(), actNLL.Right, actNLL.Names, secs, float64(b.Real)/secs, rec["memory/peak_rss_gib"])
			}
			s.record(rec)
			bar.Add(1, fmt.Sprintf("loss %.3f", loss))
			if cfg.CheckpointEvery > 0 && state.Step%cfg.CheckpointEvery == 0 {
				if err := save(); err != nil {
					return err
				}
			}
			if afterSFTStep != nil {
				afterSFTStep(state.Step)
			}
		}
		if len(valBatches) > 0 {
			if err := validateSFT(s, eng, valBatches, cfg.Model.Vocab, &state, log); err != nil {
				return err
			}
		}
		state.Epoch++
		state.Batch = 0
		if err := save(); err != nil {
			return err
		}
	}
	bar.Done()
	fmt.Fprintf(log, "train sft: done, checkpoint %s\n", s.st.URI(cfg.Out))
	return s.saveMerged(pol, eng, cfg.SaveMerged, cfg.Out)
}

// sftStart resumes from the latest checkpoint in cfg.Out (filling state),
// or starts afresh: mlerl's model with the vocabulary built from the
// training corpus and what it must hold (requiredTexts), initialised from
// the seed; a Hugging Face policy from its folder (its engine draws fresh
// adapters and value head from the seed). It returns the policy and the
// checkpoint whose weights the engine starts from.
func sftStart(ctx context.Context, s *stage, cfg SFTConfig, train []schemas.SFTExample, state *sftState) (*policy.Policy, *policy.Checkpoint, error) {
	kind, dir, _ := policy.ParseSpec(cfg.Policy)
	ck, err := s.latest(ctx, cfg.Out, cfg.Resume, nil, state)
	if err != nil {
		return nil, nil, fmt.Errorf("train sft: %w", err)
	}
	if ck != nil {
		pol, err := resumedPolicy(s, ck, kind, dir, cfg.Tokenizer)
		if err != nil {
			return nil, nil, fmt.Errorf("train sft: %w", err)
		}
		if kind == policy.KindMLERL && (ck.Model.Layers != cfg.Model.Layers || ck.Model.DModel != cfg.Model.DModel) {
			return nil, nil, fmt.Errorf("train sft: %s holds a %dx%d model but the config asks for %dx%d; use another out folder or resume=false", s.st.URI(ck.Dir), ck.Model.Layers, ck.Model.DModel, cfg.Model.Layers, cfg.Model.DModel)
		}
		fmt.Fprintf(s.log, "train sft: resuming from %s at step %d (epoch %d, batch %d)\n", s.st.URI(ck.Dir), state.Step, state.Epoch, state.Batch)
		return pol, ck, nil
	}
	if kind != policy.KindMLERL {
		pol, err := policy.OpenSpec(cfg.Policy, cfg.Model, cfg.Tuning, cfg.Adapter)
		if err != nil {
			return nil, nil, fmt.Errorf("train sft: %w", err)
		}
		return pol, &policy.Checkpoint{Model: pol.Model}, nil
	}
	tok, err := policy.OpenTokenizer(cfg.Tokenizer)
	if err != nil {
		return nil, nil, fmt.Errorf("train sft: %w", err)
	}
	corpus := make([]string, 0, 2*len(train))
	for _, r := range train {
		corpus = append(corpus, r.Prompt, r.Response)
	}
	required, err := requiredTexts(ctx, s)
	if err != nil {
		return nil, nil, fmt.Errorf("train sft: %w", err)
	}
	vocab := policy.BuildVocab(tok, corpus, cfg.VocabMinCount, required...)
	mc := cfg.Model
	mc.Vocab = vocab.Size()
	return policy.NewMLERL(mc, vocab, tok), &policy.Checkpoint{Model: mc, Vocab: vocab, Weights: policy.InitWeights(mc, uint64(cfg.Seed))}, nil
}

// encodeExamples encodes examples as SFT sees them (the policy's prompt
// fitting rule, then the response); refit counts the prompts that lost
// history lines to fit model.prompt_tokens.
func encodeExamples(pol *policy.Policy, source string, rs []schemas.SFTExample) (out []encoded, refit int, err error) {
	out = make([]encoded, len(rs))
	whole, err := pol.EncodePrompt("")
	if err != nil {
		whole = nil // the prompt's own tokens are then counted alone
	}
	frame := max(len(whole), 1) // BOS, or the chat's fixed tokens
	for i, r := range rs {
		e, err := encodeExample(pol, r.Prompt, r.Response)
		if err != nil {
			return nil, 0, fmt.Errorf("train sft: %s example %s: %w", source, r.ExampleID, err)
		}
		if plain, _ := pol.Encode(r.Prompt); len(plain)+frame != e.Response {
			refit++
		}
		if r.Weight != nil {
			if !(*r.Weight > 0) || math.IsInf(*r.Weight, 0) {
				return nil, 0, fmt.Errorf("train sft: %s example %s: weight %v is not a positive number; rebuild the dataset with `mlerl dataset`", source, r.ExampleID, *r.Weight)
			}
			e.Weight = float32(*r.Weight)
		}
		out[i] = e
	}
	return out, refit, nil
}

// weighActions gives the examples' action spans (actionSpan) weight w,
// and says how many responses have none.
func weighActions(exs []encoded, w float64, log io.Writer) {
	spans := 0
	for i := range exs {
		if exs[i].Act[1] > exs[i].Act[0] {
			spans++
			exs[i].ActWeight = float32(w)
		}
	}
	if spans < len(exs) {
		fmt.Fprintf(log, "train sft: %d of %d responses have no action name the tokenizer writes apart (no \"Action:\" line, or its tokens cross the name's bounds): action_weight and losses/sft_action leave them out\n", len(exs)-spans, len(exs))
	}
}

// packSFT packs every epoch's batches (each in its own order,
// epochOrder) and the held-out ones, and counts the updates.
func packSFT(trainEx, valEx []encoded, cfg SFTConfig) (epochs [][]packedBatch, val []packedBatch, total int) {
	epochs = make([][]packedBatch, cfg.Epochs)
	for e := range epochs {
		epochs[e] = packBatches(trainEx, epochOrder(len(trainEx), cfg.Seed, e), cfg.BatchRows, cfg.Model.Ctx)
		total += len(epochs[e])
	}
	identity := make([]int, len(valEx))
	for i := range identity {
		identity[i] = i
	}
	return epochs, packBatches(valEx, identity, cfg.BatchRows, cfg.Model.Ctx), total
}

// validateSFT records and logs the validation loss at an epoch's end (or
// at max_steps inside one), that of the action names' tokens and how many
// names the model predicts.
func validateSFT(s *stage, eng policy.Engine, batches []packedBatch, vocab int, state *sftState, log io.Writer) error {
	val, n, act, err := validationLoss(eng, batches, vocab)
	if err != nil {
		return fmt.Errorf("train sft: validation: %w", err)
	}
	rec := map[string]any{"stage": "sft", "step": state.Step, "epoch": state.Epoch, "losses/val": val}
	actText := ""
	if act.N > 0 {
		rec["losses/val_action"], rec["charts/val_action_accuracy"] = act.Mean(), act.Accuracy()
		actText = fmt.Sprintf(" (%.4f on the %d tokens of action names; %d of %d names the most likely, teacher-forced)", act.Mean(), act.N, act.Right, act.Names)
	}
	s.record(rec)
	state.Validated = state.Step
	fmt.Fprintf(log, "train sft: epoch %d, update %d: validation loss %.4f on %d held-out response tokens%s\n", state.Epoch, state.Step, val, n, actText)
	return nil
}

// validationLoss is the mean SFT loss per response token over batches,
// the number of tokens, and the loss of the tokens of action names.
func validationLoss(eng policy.Engine, batches []packedBatch, vocabSize int) (float64, int, actionNLL, error) {
	sum, n := 0.0, 0
	var act actionNLL
	for _, b := range batches {
		idx, targets, weights, isAct := b.targets()
		logits, _, err := eng.Logits(b.Batch, idx)
		if err != nil {
			return 0, 0, act, err
		}
		loss := sftLossStats(targets, weights, isAct, vocabSize, &act)(logits, nil, make([]float32, len(logits)), nil)
		sum += loss * float64(b.NumTargets)
		n += b.NumTargets
	}
	return sum / float64(max(n, 1)), n, act, nil
}

// requiredTexts are what the vocabulary must hold in its own tokens
// whatever the corpus: the idea catalog, the tasks' descriptions and the
// ideas of the ideas dataset (held-out tasks' plans included), and the
// action grammar.
func requiredTexts(ctx context.Context, s *stage) ([]string, error) {
	out := []string{policy.GrammarText()}
	for _, i := range catalog.All() {
		out = append(out, i.Text)
	}
	if m, err := datasets.Latest(ctx, s.st, schemas.Tasks.Name); err == nil {
		ts, err := datasets.ReadAll[schemas.Task](ctx, s.st, m, schemas.Tasks)
		if err != nil {
			return nil, err
		}
		for _, t := range ts {
			out = append(out, t.Title, t.Description)
		}
	}
	if m, err := datasets.Latest(ctx, s.st, schemas.Ideas.Name); err == nil {
		is, err := datasets.ReadAll[schemas.Idea](ctx, s.st, m, schemas.Ideas)
		if err != nil {
			return nil, err
		}
		for _, i := range is {
			if i.Kept {
				out = append(out, i.Text)
			}
		}
	}
	return out, nil
}
