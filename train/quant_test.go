package train

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/policy"
)

// TestPPOKeepsTheSFTQuantizedBase: LoRA SFT of a GGUF file of quantized
// blocks with base_storage auto keeps the blocks (quant), and train ppo
// started from that checkpoint with base_storage auto, its config
// resolved as the loader does (Derive) and again as the run starts,
// keeps them too: the storage the adapters were trained on, which
// evaluation (ForInference) also uses. Before the fix the second
// resolution read the first one's bf16 or fp32 as asked for, and PPO
// trained the adapters on another base than SFT's.
func TestPPOKeepsTheSFTQuantizedBase(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	writeSFTExamples(t, root, 8)
	setupPPO(t, root)
	sft := DefaultSFTConfig()
	sft.Data, sft.Response, sft.Out = root, policy.ResponseFull, "checkpoints/gguf-sft"
	sft.Policy = "gguf:" + filepath.Join("..", "policy", "gguf", "testdata", "llama.gguf")
	sft.Model.Ctx, sft.Model.PromptTokens, sft.Model.ResponseTokens = 256, 160, 32
	sft.Tuning.LoRA.Rank, sft.Tuning.LoRA.Alpha = 4, 8
	sft.BatchRows, sft.Epochs, sft.MaxSteps = 2, 1, 1
	sft.Derive()
	var log bytes.Buffer
	if err := runSFT(ctx, sft, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "base quant") {
		t.Fatalf("SFT of a quantized GGUF file with base_storage auto did not keep its blocks:\n%s", log.String())
	}
	cfg := tinyPPOConfig(root)
	cfg.SFT, cfg.Out = sft.Out, "checkpoints/gguf-ppo"
	cfg.Tuning = policy.DefaultTuning() // base_storage auto
	cfg.Updates, cfg.Minibatches, cfg.UpdateEpochs, cfg.MaxNewTokens = 1, 1, 1, 2
	cfg.Derive() // as the config loader resolves it; newPPORun resolves it again
	log.Reset()
	if err := RunPPOWith(ctx, cfg, pickD, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "base stored quant;") {
		t.Errorf("train ppo from an SFT checkpoint on a quantized base did not keep the blocks:\n%s", log.String())
	}
}
