package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/policy/gguf"
)

// exportGGUFConfig is `mlerl export gguf`'s configuration: what to write
// (a training checkpoint, or a pretrained model with an adapter) and how.
type exportGGUFConfig struct {
	Data       string `yaml:"data" help:"data root (local path or gs://bucket/prefix) holding checkpoint"`
	Checkpoint string `yaml:"checkpoint" help:"a train sft or train ppo checkpoint folder in the data root (e.g. checkpoints/ppo) of a Hugging Face or GGUF policy: the model it trained, adapters merged (or its fully fine-tuned weights)"`
	Which      string `yaml:"which" help:"with checkpoint: selected (the one train ppo selected; the latest otherwise) or last"`
	Policy     string `yaml:"policy" help:"instead of checkpoint: hf:DIR or gguf:FILE, a pretrained model to write as it is or with adapter merged"`
	Adapter    string `yaml:"adapter" help:"with policy: a PEFT LoRA adapter folder (e.g. a checkpoint's adapter/) merged into the model"`
	Out        string `yaml:"out" help:"the GGUF file to write (a local path that does not exist yet)"`
	Type       string `yaml:"type" help:"how the matrices are stored: f16, bf16, q8_0 or f32 (norms and biases stay f32, as llama.cpp keeps them)"`
}

func defaultExportGGUFConfig() exportGGUFConfig {
	return exportGGUFConfig{Data: "./data", Which: policy.CheckpointSelected, Type: "f16"}
}

func (c exportGGUFConfig) Validate() error {
	switch {
	case c.Out == "":
		return config.Errorf("out", c.Out, "must name the GGUF file to write")
	case strings.HasPrefix(c.Out, "gs://"):
		return config.Errorf("out", c.Out, "must be a local path (llama.cpp reads local files)")
	case (c.Checkpoint == "") == (c.Policy == ""):
		return config.Errorf("checkpoint", c.Checkpoint, "give exactly one of checkpoint (a training run's folder) and policy (hf:DIR or gguf:FILE)")
	case c.Adapter != "" && c.Policy == "":
		return config.Errorf("adapter", c.Adapter, "goes with policy (a checkpoint holds its own adapter)")
	case c.Which != policy.CheckpointSelected && c.Which != policy.CheckpointLast:
		return config.Errorf("which", c.Which, "want %s or %s", policy.CheckpointSelected, policy.CheckpointLast)
	}
	if _, ok := exportType(c.Type); !ok {
		return config.Errorf("type", c.Type, "want f16, bf16, q8_0 or f32")
	}
	if c.Policy != "" {
		_, _, err := policy.ParseSpec(c.Policy)
		if err == nil && !policy.Pretrained(c.Policy) {
			err = fmt.Errorf("mlerl's own model has no GGUF form: want hf:DIR or gguf:FILE")
		}
		if err != nil {
			return config.Errorf("policy", c.Policy, "%v", err)
		}
	}
	if _, err := os.Lstat(c.Out); err == nil {
		return config.Errorf("out", c.Out, "exists: name a new file")
	}
	if st, err := os.Stat(filepath.Dir(c.Out)); err != nil || !st.IsDir() {
		return config.Errorf("out", c.Out, "its folder %s does not exist", filepath.Dir(c.Out))
	}
	return nil
}

func exportType(s string) (gguf.Type, bool) {
	t, ok := gguf.ParseType(s)
	if !ok || (t != gguf.F16 && t != gguf.BF16 && t != gguf.Q8_0 && t != gguf.F32) {
		return 0, false
	}
	return t, true
}

// exportBudgets are what opening a model for export takes: no prompt is
// encoded, so they only need to fit every model.
var exportBudgets = policy.Config{Ctx: 64, PromptTokens: 40, ResponseTokens: 16}

// runExportGGUF writes the GGUF file: the checkpoint's trained model (its
// policy.json names the base; its weights hold the adapters or every
// weight), or the pretrained model with the adapter merged.
func runExportGGUF(ctx context.Context, cfg exportGGUFConfig) error {
	typ, _ := exportType(cfg.Type)
	var (
		pol  *policy.Policy
		ws   []policy.Tensor
		from string
	)
	if cfg.Checkpoint != "" {
		st, err := store.Open(ctx, cfg.Data)
		if err != nil {
			return fmt.Errorf("export gguf: %w", err)
		}
		sub, _, err := policy.PickCheckpoint(ctx, st, cfg.Checkpoint, cfg.Which)
		if err != nil {
			return fmt.Errorf("export gguf: %w", err)
		}
		if sub == "" {
			return fmt.Errorf("export gguf: no checkpoint in %s (run mlerl train sft or ppo first)", st.URI(cfg.Checkpoint))
		}
		ck, err := policy.LoadCheckpoint(ctx, st, sub, nil, nil)
		if err != nil {
			return fmt.Errorf("export gguf: %w", err)
		}
		if ck.Source == nil {
			return fmt.Errorf("export gguf: %s holds mlerl's own model, which has no GGUF form: train a Hugging Face or GGUF policy (--policy hf:DIR or gguf:FILE)", st.URI(sub))
		}
		if pol, err = ck.OpenPolicy(""); err != nil {
			return fmt.Errorf("export gguf: %w", err)
		}
		ws, from = ck.Weights, st.URI(sub)
	} else {
		var err error
		if pol, err = policy.OpenSpec(cfg.Policy, exportBudgets, policy.DefaultTuning(), cfg.Adapter); err != nil {
			return fmt.Errorf("export gguf: %w", err)
		}
		if cfg.Adapter == "" {
			pol.Model.LoRA = nil // the model as it is
		}
		from = pol.Source.Spec()
		if cfg.Adapter != "" {
			from += " + adapter " + cfg.Adapter
		}
	}
	defer pol.Close()
	if err := pol.WriteGGUF(cfg.Out, ws, typ); err != nil {
		return err
	}
	st, err := os.Stat(cfg.Out)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "export gguf: wrote %s (%s, %.1f MB) from %s: llama.cpp, the gguf package and --policy gguf:%s read it\n", cfg.Out, strings.ToUpper(cfg.Type), float64(st.Size())/1e6, from, cfg.Out)
	return nil
}

func init() {
	commands = append(commands, func() *cobra.Command {
		cmd := &cobra.Command{
			Use:   "export",
			Short: "Write what mlerl trained in the formats other tools deploy",
		}
		cmd.AddCommand(stageCommand("gguf", "Write a trained Hugging Face or GGUF policy (a training checkpoint, or a model with a PEFT adapter) as a GGUF file for llama.cpp", defaultExportGGUFConfig, runExportGGUF))
		return cmd
	})
}
