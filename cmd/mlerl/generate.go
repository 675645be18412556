package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/progress"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
)

// `mlerl generate`: one answer of a model to one prompt, so that a user
// sees a pretrained model (or a checkpoint of `mlerl train`) answer before
// and after training it. The prompt is rendered as one user turn in the
// model's own chat format (policy.Policy.UserTurn, what transformers'
// apply_chat_template writes), or taken as raw text with --chat=false; at
// temperature 0 the answer is greedy, transformers' generate(do_sample=
// False) token for token (cmd/mlerl/generate_test.go checks it against
// references scripts/hf_reference.py made).

func init() {
	commands = append(commands, generateCommand)
}

// generateConfig is the config of `mlerl generate`.
type generateConfig struct {
	Policy     string `yaml:"policy" help:"the model: hf:DIR (a Hugging Face checkpoint folder) or gguf:FILE (a GGUF model file); or give checkpoint instead"`
	Adapter    string `yaml:"adapter" help:"with policy: a PEFT LoRA adapter folder on it (empty: the model as it is)"`
	Checkpoint string `yaml:"checkpoint" help:"instead of policy: a checkpoint folder of mlerl train in the data root (checkpoints/sft, checkpoints/ppo: the checkpoint which names; or one step-<N> folder)"`
	Which      string `yaml:"which" help:"with checkpoint: selected (the one train ppo selected by its rule; the latest otherwise) or last"`
	Data       string `yaml:"data" help:"data root of checkpoint: a local folder or gs://bucket/prefix"`
	Prompt     string `yaml:"prompt" help:"the prompt's text (or prompt_file)"`
	PromptFile string `yaml:"prompt_file" help:"a file holding the prompt's text (- reads standard input)"`
	Chat       bool   `yaml:"chat" help:"render the prompt as one user turn in the model's own chat format, as apply_chat_template does (false: the raw text, control tokens written in it read as theirs, nothing added)"`
	// StagePrompt shows a model a state as the stages show it, to see
	// what a checkpoint does there.
	StagePrompt bool `yaml:"stage_prompt" help:"render the prompt as SFT, PPO and evaluation render a state's compact prompt: after the system message the policy was trained with (mlerl's, or the one its checkpoint records), fitted to its prompt budget"`
	// The sampling.
	MaxNewTokens int     `yaml:"max_new_tokens" help:"longest answer in tokens"`
	Temperature  float64 `yaml:"temperature" help:"sampling temperature (0: greedy, transformers' generate(do_sample=False) token for token)"`
	TopP         float64 `yaml:"top_p" help:"nucleus sampling threshold (1: every token)"`
	Seed         int64   `yaml:"seed" help:"seed of the sampling (temperature above 0): the same seed gives the same answer"`
	Engine       string  `yaml:"engine" help:"engine: native (CPU) or gomlx (GoMLX; XLA on a GPU with GOMLX_BACKEND=xla:cuda)"`
	JSON         bool    `yaml:"json" help:"print one JSON object (the prompt's and the answer's token ids, the answer's text, whether it stopped) instead of streaming the text"`
}

func defaultGenerateConfig() generateConfig {
	return generateConfig{Data: "./data", Which: policy.CheckpointSelected, Chat: true, MaxNewTokens: 256, TopP: 1, Seed: 1, Engine: policy.EngineNative}
}

// maxPromptBytes bounds a prompt file: a prompt is read whole, and a
// model's context holds at most some hundred thousand tokens.
const maxPromptBytes = 4 << 20

// Validate implements config.Validator: every key, before anything is
// read.
func (c *generateConfig) Validate() error {
	switch {
	case c.Policy == "" && c.Checkpoint == "":
		return config.Errorf("policy", c.Policy, "is empty: name the model (hf:DIR or gguf:FILE), or give checkpoint (a folder of mlerl train)")
	case c.Policy != "" && c.Checkpoint != "":
		return config.Errorf("checkpoint", c.Checkpoint, "names a model, and so does policy %q: give one of them", c.Policy)
	case c.Adapter != "" && c.Policy == "":
		return config.Errorf("adapter", c.Adapter, "is a PEFT adapter of a pretrained model: it needs policy (a checkpoint of mlerl train holds its own adapter)")
	case c.Prompt == "" && c.PromptFile == "":
		return config.Errorf("prompt", c.Prompt, "is empty: give the prompt's text, or prompt_file")
	case c.Prompt != "" && c.PromptFile != "":
		return config.Errorf("prompt_file", c.PromptFile, "and prompt both give the prompt: give one of them")
	case c.MaxNewTokens < 1:
		return config.Errorf("max_new_tokens", c.MaxNewTokens, "must be at least 1")
	case !(c.Temperature >= 0) || math.IsInf(c.Temperature, 0):
		return config.Errorf("temperature", c.Temperature, "must be a number >= 0 (0: greedy)")
	case !(c.TopP > 0 && c.TopP <= 1):
		return config.Errorf("top_p", c.TopP, "must be in (0, 1] (1: every token)")
	case c.Engine != policy.EngineNative && c.Engine != policy.EngineGoMLX:
		return config.Errorf("engine", c.Engine, "want %s or %s", policy.EngineNative, policy.EngineGoMLX)
	case c.Which != policy.CheckpointSelected && c.Which != policy.CheckpointLast:
		return config.Errorf("which", c.Which, "want %s or %s", policy.CheckpointSelected, policy.CheckpointLast)
	case c.StagePrompt && !c.Chat:
		return config.Errorf("stage_prompt", c.StagePrompt, "renders the prompt in the chat format: drop --chat=false")
	case c.Checkpoint != "" && c.Data == "":
		return config.Errorf("data", c.Data, "must name the data root checkpoint is in")
	}
	if c.Policy != "" {
		switch kind, _, err := policy.ParseSpec(c.Policy); {
		case err != nil:
			return config.Errorf("policy", c.Policy, "%v", err)
		case kind == policy.KindMLERL:
			return config.Errorf("policy", c.Policy, "names mlerl's own model, whose weights are in its checkpoints: give checkpoint (e.g. checkpoints/sft) instead")
		}
	}
	return nil
}

func generateCommand() *cobra.Command {
	var path string
	bound := defaultGenerateConfig()
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "One answer of a model to one prompt: a pretrained model (--policy hf:DIR or gguf:FILE) or a checkpoint of mlerl train (--checkpoint)",
		Long: `One answer of a model to one prompt, streamed to standard output.

The prompt is one user turn in the model's own chat format, as
transformers' apply_chat_template writes it (its default system prompt
included when the template has one); --chat=false reads it as raw text.
At --temperature 0 (the default) the answer is greedy: the tokens
transformers' generate(do_sample=False) gives on the same folder.

  mlerl generate --policy gguf:FILE --prompt "What is the capital of France?"
  mlerl generate --checkpoint checkpoints/ppo --data ./data --prompt_file state.txt --json

Every flag is a config key (--config loads a YAML file; flags override
it); snake_case flags take the kebab-case spelling too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Resolve(cmd.Flags(), path, defaultGenerateConfig)
			if err != nil {
				return fmt.Errorf("generate: %w", err)
			}
			return runGenerate(cmd.Context(), cfg, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "YAML config file (flags override its values)")
	config.Bind(cmd.Flags(), &bound)
	return cmd
}

// generated is what --json prints.
type generated struct {
	Model     string  `json:"model"`
	Prompt    []int32 `json:"prompt_ids"`
	IDs       []int32 `json:"ids"`
	Text      string  `json:"text"`
	Stopped   bool    `json:"stopped"`
	Seconds   float64 `json:"seconds"`
	Rendering string  `json:"rendering"`
}

func runGenerate(ctx context.Context, cfg generateConfig, stdin io.Reader, out, log io.Writer) error {
	text, err := readPrompt(cfg, stdin)
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	start := time.Now()
	pol, build, source, err := openGenerator(ctx, cfg)
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	defer pol.Close()
	encode, rendering := pol.UserTurn, "chat"
	switch {
	case !cfg.Chat:
		encode, rendering = pol.RawPrompt, "raw"
	case cfg.StagePrompt:
		encode, rendering = pol.EncodePrompt, "as the stages render a state"
		if pol.Kind() != policy.KindMLERL && cfg.Policy != "" {
			// A pretrained model has no prompt budget of its own: its
			// positions, less the answer's.
			pol.Model.PromptTokens = pol.MaxPositions() - cfg.MaxNewTokens - 1
		}
	}
	prompt, err := encode(text)
	if err != nil {
		return fmt.Errorf("generate: the prompt: %w", err)
	}
	if err := pol.FitContext(len(prompt), cfg.MaxNewTokens); err != nil {
		return fmt.Errorf("generate: %s: %w", source, err)
	}
	eng, err := build()
	if err != nil {
		return fmt.Errorf("generate: %s: %w", source, err)
	}
	defer eng.Close()
	loaded := time.Since(start)

	if ctx.Err() != nil { // a signal while the model loaded
		return interrupted(ctx, 0, cfg.MaxNewTokens)
	}
	s := streamer{pol: pol, out: out, quiet: cfg.JSON}
	opts := policy.GenerateOptions{Temperature: cfg.Temperature, TopP: cfg.TopP, MaxNewTokens: cfg.MaxNewTokens,
		Seed: uint64(cfg.Seed), AnyID: true, Context: ctx, OnTokens: func(_ int, ids []int32) { s.add(ids) }}
	start = time.Now()
	samples, err := policy.Generator{Engine: eng, Policy: pol}.Generate([][]int32{prompt}, opts)
	if ctx.Err() != nil {
		if !cfg.JSON && len(s.written) > 0 {
			fmt.Fprintln(out)
		}
		return interrupted(ctx, len(s.ids), cfg.MaxNewTokens)
	}
	if err != nil {
		return fmt.Errorf("generate: %s: %w", source, err)
	}
	secs := time.Since(start).Seconds()
	smp := samples[0]
	answer := pol.Decode(smp.Tokens)
	defer fmt.Fprintf(log, "generate: %s: %d prompt tokens (%s), %d new tokens in %.1f s (%.1f tokens/s; loading took %.1f s)%s\n",
		source, len(prompt), rendering, len(smp.Tokens), secs, float64(len(smp.Tokens))/secs, loaded.Seconds(), stopNote(smp, cfg.MaxNewTokens))
	if cfg.JSON {
		b, err := json.Marshal(generated{Model: source, Prompt: prompt, IDs: smp.Tokens, Text: answer, Stopped: smp.Stopped, Seconds: secs, Rendering: rendering})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		return err
	}
	return s.finish(answer)
}

// interrupted is the one line of a generation a signal stopped.
func interrupted(ctx context.Context, done, maxNew int) error {
	return &progress.InterruptedError{Label: "mlerl generate", Unit: "new tokens", Done: done, Total: maxNew,
		Rerun: "nothing was written; rerun the same command to generate again", Err: ctx.Err()}
}

func stopNote(s policy.Sample, maxNew int) string {
	if s.Stopped {
		return ""
	}
	return fmt.Sprintf("; stopped by max_new_tokens %d", maxNew)
}

// readPrompt is the prompt's text: the prompt key, or the file (standard
// input for "-") prompt_file names, a regular file of at most
// maxPromptBytes.
func readPrompt(cfg generateConfig, stdin io.Reader) (string, error) {
	if cfg.PromptFile == "" {
		return cfg.Prompt, nil
	}
	var r io.Reader = stdin
	if cfg.PromptFile != "-" {
		// Stat before opening: opening a FIFO would wait for a writer.
		st, err := os.Stat(cfg.PromptFile)
		if err != nil {
			return "", fmt.Errorf("prompt_file: %w", err)
		}
		if !st.Mode().IsRegular() {
			return "", fmt.Errorf("prompt_file %s is not a regular file (%s): give a file of text, or - for standard input", cfg.PromptFile, st.Mode().Type())
		}
		f, err := os.Open(cfg.PromptFile)
		if err != nil {
			return "", fmt.Errorf("prompt_file: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxPromptBytes+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("prompt_file %s: %w", cfg.PromptFile, err)
	case len(b) > maxPromptBytes:
		return "", fmt.Errorf("prompt_file %s holds more than %d MiB: no model's context takes a prompt that long", cfg.PromptFile, maxPromptBytes>>20)
	case len(b) == 0:
		return "", fmt.Errorf("prompt_file %s is empty: give the prompt's text", cfg.PromptFile)
	}
	return string(b), nil
}

// openGenerator opens the model cfg names: its policy, and a function
// that builds its engine once the policy's context is sized
// (Policy.FitContext). source names it in messages.
func openGenerator(ctx context.Context, cfg generateConfig) (pol *policy.Policy, build func() (policy.Engine, error), source string, err error) {
	if cfg.Policy != "" {
		// A pretrained model (Validate refused mlerl's own). The context is
		// sized for the prompt later: these budgets only pass the
		// opening's checks.
		tu := policy.DefaultTuning()
		tu.BaseStorage = policy.MatmulFP32 // what ForInference stores, below
		pol, err := policy.OpenSpec(cfg.Policy, policy.Config{Ctx: 32, PromptTokens: 16, ResponseTokens: 8}, tu, cfg.Adapter)
		if err != nil {
			return nil, nil, "", err
		}
		if cfg.Adapter == "" {
			pol.Model.LoRA = nil // the model as it is
		}
		pol.ForInference(cfg.Engine)
		source = pol.SpecOf()
		if cfg.Adapter != "" {
			source += " + adapter " + pol.Source.Adapter
		}
		return pol, func() (policy.Engine, error) { return pol.NewEngine(cfg.Engine, 0, nil) }, source, nil
	}
	st, err := store.Open(ctx, cfg.Data)
	if err != nil {
		return nil, nil, "", err
	}
	key := strings.Trim(cfg.Checkpoint, "/")
	tr, err := policy.OpenTrained(ctx, st, key, cfg.Which)
	if err != nil {
		return nil, nil, "", fmt.Errorf("checkpoint %s: %w", cfg.Checkpoint, err)
	}
	tr.Policy.ForInference(cfg.Engine)
	return tr.Policy, func() (policy.Engine, error) { return tr.Engine(cfg.Engine) }, tr.Source, nil
}

// streamer writes an answer's text to out as its tokens come: what the
// tokens decode to so far, less a last character whose bytes are not all
// in yet (byte-level tokens split UTF-8 sequences).
type streamer struct {
	pol     *policy.Policy
	out     io.Writer
	quiet   bool // --json: count the tokens only
	ids     []int32
	written string
	err     error
}

func (s *streamer) add(ids []int32) {
	s.ids = append(s.ids, ids...)
	if s.quiet {
		return
	}
	text := s.pol.Decode(s.ids)
	if !strings.HasPrefix(text, s.written) {
		return // finish writes what is left
	}
	end := len(text)
	for end > len(s.written) && !utf8.ValidString(text[len(s.written):end]) && len(text)-end < utf8.UTFMax {
		end--
	}
	if !utf8.ValidString(text[len(s.written):end]) {
		return
	}
	s.write(text[len(s.written):end])
}

func (s *streamer) write(t string) {
	if s.err == nil && t != "" {
		_, s.err = io.WriteString(s.out, t)
		s.written += t
	}
}

// finish writes the rest of the answer and a newline.
func (s *streamer) finish(answer string) error {
	if strings.HasPrefix(answer, s.written) {
		s.write(answer[len(s.written):])
	}
	if s.err == nil {
		_, s.err = io.WriteString(s.out, "\n")
	}
	return s.err
}
