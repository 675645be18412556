package policy

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/policy/native"
)

// LoRAConfig is a LoRA adapter's shape (Hu et al., as PEFT implements
// it): rank, alpha (the update's scale is alpha/rank), dropout on the
// adapter's input while training, and the decoder Linears it adapts.
type LoRAConfig struct {
	Rank    int      `yaml:"rank" help:"LoRA rank r (Hugging Face policies)"`
	Alpha   float64  `yaml:"alpha" help:"LoRA alpha: the update is scaled by alpha/rank"`
	Dropout float64  `yaml:"dropout" help:"LoRA dropout on the adapters' inputs in training forwards (SFT; PPO trains without dropout so that its ratio starts at 1)"`
	Targets []string `yaml:"targets" help:"the adapted Linears of every layer: some of q, k, v, o, gate, up, down (PEFT's q_proj... too)"`
}

// loraShort are LoRA's targets in native's short names, in the order
// PEFT's target_modules sorts them to (for a stable adapter_config.json).
var loraShort = []string{"q", "k", "v", "o", "gate", "up", "down"}

// Native is the adapter config as native.Options.LoRA takes it.
func (l LoRAConfig) Native() native.LoRAConfig {
	return native.LoRAConfig{Rank: l.Rank, Alpha: l.Alpha, Dropout: l.Dropout, Targets: slices.Clone(l.Targets)}
}

// Validate checks the adapter config, each failure one line naming the
// key (relative to the lora block).
func (l LoRAConfig) Validate() error {
	switch {
	case l.Rank < 1:
		return config.Errorf("rank", l.Rank, "must be at least 1 (full_finetune trains every weight instead)")
	case !(l.Alpha > 0) || math.IsInf(l.Alpha, 0):
		return config.Errorf("alpha", l.Alpha, "must be a positive number (the scale is alpha/rank)")
	case !(l.Dropout >= 0 && l.Dropout < 1):
		return config.Errorf("dropout", l.Dropout, "must be in [0, 1)")
	case len(l.Targets) == 0:
		return config.Errorf("targets", l.Targets, "must name some of %s", strings.Join(loraShort, ", "))
	}
	for i, t := range l.Targets {
		if !slices.Contains(loraShort, shortTarget(t)) {
			return config.Errorf("targets", l.Targets, "item %d %q is not one of %s (or PEFT's q_proj, ...)", i+1, t, strings.Join(loraShort, ", "))
		}
	}
	return nil
}

// shortTarget is a target in native's short name ("q_proj" -> "q").
func shortTarget(t string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(t)), "_proj")
}

// normalized is l with its targets short, unique and in loraShort's order.
func (l LoRAConfig) normalized() LoRAConfig {
	var ts []string
	for _, s := range loraShort {
		if slices.ContainsFunc(l.Targets, func(t string) bool { return shortTarget(t) == s }) {
			ts = append(ts, s)
		}
	}
	l.Targets = ts
	return l
}

// Tuning is how a Hugging Face policy's weights train in `train sft` and
// `train ppo`: LoRA adapters on a frozen base by default, every weight
// with full_finetune. mlerl's own model, trained from scratch, trains
// every weight and ignores these keys.
type Tuning struct {
	LoRA LoRAConfig `yaml:"lora"`
	// FullFinetune trains every weight (a checkpoint then holds them all,
	// and no adapter folder is written).
	FullFinetune bool `yaml:"full_finetune" help:"Hugging Face policies: train every weight instead of LoRA adapters (checkpoints then hold the whole model)"`
	// BaseStorage is how the frozen base is stored (native.Options'
	// BaseStorage and MatrixStorage): auto, fp32, bf16, quant or a
	// quantized format (precision.go's ResolveBaseStorage).
	BaseStorage string `yaml:"base_storage" help:"Hugging Face policies with LoRA: how the frozen base is stored: auto (quant for a GGUF file of quantized blocks on the native engine, else bf16 where the CPU's bf16 products outrun float32: AMX tiles, or AMD's AVX512_BF16; else fp32; the printed config shows what it resolved to), fp32, bf16, quant (a GGUF file's quantized matrices kept in their blocks, the native engine multiplying by them: Q8_0/Q4_0/Q4_1 directly, the K-quants, IQ4 and Q5 types dequantized as it computes), or q8_0, q4_0, q4_1 (every base matrix quantized to that format on load)"`
	// autoStorage records that BaseStorage was auto before it was
	// resolved without knowing the base (train ppo from an SFT
	// checkpoint, whose policy.json names it): the stage then keeps the
	// checkpoint's quantized storage (ResolveAutoFor).
	autoStorage bool
	// Recompute is native.Options.Recompute.
	Recompute bool `yaml:"recompute" help:"Hugging Face policies: keep only each block's input in the forward pass and recompute its activations in the backward pass (a fraction of the memory for about one more forward of time; the native engine's: XLA plans GoMLX's memory itself)"`
}

// DefaultTuning is LoRA of rank 16 and alpha 32 with dropout 0.05 on
// every Linear of the decoder (what BenchmarkLoRASFTBig measures), the
// base stored in bf16 where the CPU computes bf16 products, and
// recomputation on: what lets a 0.5B-parameter model's SFT step at the
// demo recipe's lengths fit a few GiB on CPU (policy/native/doc.go).
func DefaultTuning() Tuning {
	return Tuning{LoRA: LoRAConfig{Rank: 16, Alpha: 32, Dropout: 0.05, Targets: slices.Clone(loraShort)}, BaseStorage: MatmulAuto, Recompute: true}
}

// Validate checks the tuning keys, each failure one line naming the key.
func (t Tuning) Validate() error {
	switch t.BaseStorage {
	case MatmulAuto, MatmulBF16, MatmulFP32, StorageQuant, StorageQ8_0, StorageQ4_0, StorageQ4_1:
	default:
		return config.Errorf("base_storage", t.BaseStorage, "want %s, %s, %s, %s, %s, %s or %s", MatmulAuto, MatmulFP32, MatmulBF16, StorageQuant, StorageQ8_0, StorageQ4_0, StorageQ4_1)
	}
	if t.FullFinetune {
		if t.BaseStorage != MatmulAuto && t.BaseStorage != MatmulFP32 {
			return config.Errorf("base_storage", t.BaseStorage, "stores a frozen base; with full_finetune every weight trains in float32 (use auto or fp32)")
		}
		return nil
	}
	return config.Nest("lora", t.LoRA.Validate())
}

// Resolved is t with base_storage resolved without knowing the base
// (ResolvedFor with no spec).
func (t Tuning) Resolved() (Tuning, error) { return t.ResolvedFor("") }

// ResolvedFor is t with base_storage resolved for the policy spec names
// (ResolveBaseStorage): auto becomes quant for a GGUF file of quantized
// blocks, else what it means on this machine, or fp32 with full_finetune
// (every weight trains: nothing is stored in bf16 or in blocks). The
// stages resolve their tuning once, as their config is loaded, so that
// the config they print and record says which storage ran.
func (t Tuning) ResolvedFor(spec string) (Tuning, error) {
	if t.FullFinetune && (t.BaseStorage == MatmulAuto || t.BaseStorage == "") {
		t.BaseStorage = MatmulFP32
		return t, nil
	}
	auto := t.BaseStorage == MatmulAuto || t.BaseStorage == ""
	r, err := ResolveBaseStorage(t.BaseStorage, spec)
	if err != nil {
		return t, config.Errorf("base_storage", t.BaseStorage, "%v", err)
	}
	// A tuning resolved again (train ppo resolves its config as it is
	// loaded, then once more as it starts) keeps knowing it was auto:
	// otherwise its second pass read the first one's bf16 or fp32 as
	// asked for, and an SFT checkpoint's quantized base was stored in
	// bf16 for PPO.
	t.BaseStorage, t.autoStorage = r, (auto || t.autoStorage) && spec == ""
	return t, nil
}

// ResolvedForEngine is ResolvedFor for a stage that runs the named
// engine: auto's quant (a GGUF file's blocks kept as they are) is the
// native engine's alone, so on GoMLX auto means the precision it means
// for a float base (AutoPrecision) instead.
func (t Tuning) ResolvedForEngine(spec, engine string) (Tuning, error) {
	auto := t.BaseStorage == MatmulAuto || t.BaseStorage == ""
	r, err := t.ResolvedFor(spec)
	if err != nil || !auto || engine != EngineGoMLX || !QuantizedStorage(r.BaseStorage) {
		return r, err
	}
	if r.BaseStorage, err = AutoPrecision(); err != nil {
		return t, config.Errorf("base_storage", t.BaseStorage, "%v", err)
	}
	return r, nil
}

// ResolveAutoFor is, for a tuning resolved without knowing its base
// (Resolved), the base storage to use once the base is known: a
// checkpoint's recorded storage when it keeps its base in quantized
// blocks and base_storage was auto (auto would have picked quant had the
// base been known: the stage keeps what the checkpoint trained on), else
// the resolved value. On GoMLX (engine), which keeps no blocks, it is
// the resolved value.
func (t Tuning) ResolveAutoFor(recorded, engine string) string {
	if t.autoStorage && !t.FullFinetune && QuantizedStorage(recorded) && engine != EngineGoMLX {
		return recorded
	}
	return t.BaseStorage
}

// apply sets c's training fields from t: the adapters (none with
// full_finetune), the base's storage (resolved for the base spec names:
// model.json records what ran) and recomputation.
func (t Tuning) apply(c *Config, spec string) error {
	t, err := t.ResolvedFor(spec)
	if err != nil {
		return err
	}
	c.LoRA, c.BaseStorage, c.Recompute = nil, t.BaseStorage, t.Recompute
	if !t.FullFinetune {
		lo := t.LoRA.normalized()
		c.LoRA = &lo
	}
	if c.LoRA == nil {
		c.BaseStorage = MatmulFP32 // every weight trains: nothing to store in bf16 or in blocks
	}
	return nil
}

// Describe says in a few words how c's weights train, for the stages'
// first log line.
func (c Config) Describe() string {
	if c.LoRA == nil {
		return fmt.Sprintf("%s params, all trained", count(c.NumParams()))
	}
	return fmt.Sprintf("%s params, LoRA rank %d alpha %g on %s (%s trained with the value head), base %s, recompute %v",
		count(c.NumParams()), c.LoRA.Rank, c.LoRA.Alpha, strings.Join(c.LoRA.Targets, ","), count(c.NumTrainable()), c.BaseStorage, c.Recompute)
}

// count writes n as 1.5M, 494M, 3.1B.
func count(n int) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// Budgets are the lengths a Hugging Face policy's prompts and responses
// are fitted to, where a stage starts from its folder rather than from a
// checkpoint that records them (train ppo, evaluate): the model keys of
// train sft that apply to such a policy.
type Budgets struct {
	Ctx            int `yaml:"ctx" help:"with policy hf:DIR or gguf:FILE: context length in tokens (prompt_tokens + response_tokens + 1 must fit; at most the model's max_position_embeddings)"`
	PromptTokens   int `yaml:"prompt_tokens" help:"with policy hf:DIR or gguf:FILE: the chat-rendered prompt's budget in tokens (longer prompts drop their oldest history lines)"`
	ResponseTokens int `yaml:"response_tokens" help:"with policy hf:DIR or gguf:FILE: longest response in tokens, its end of turn included"`
}

// DefaultBudgets are the demo recipe's: a 448-token prompt and a
// 160-token response in 640.
func DefaultBudgets() Budgets {
	d := DemoConfig()
	return Budgets{Ctx: d.Ctx, PromptTokens: d.PromptTokens, ResponseTokens: d.ResponseTokens}
}

// Config is the budgets as the model config OpenHF takes them.
func (b Budgets) Config() Config {
	return Config{Ctx: b.Ctx, PromptTokens: b.PromptTokens, ResponseTokens: b.ResponseTokens}
}

// Validate checks the budgets fit together, each failure one line naming
// the key (relative to the model block).
func (b Budgets) Validate() error {
	switch {
	case b.PromptTokens < 16:
		return config.Errorf("prompt_tokens", b.PromptTokens, "must be at least 16")
	case b.ResponseTokens < 2:
		return config.Errorf("response_tokens", b.ResponseTokens, "must be at least 2")
	case b.Ctx < 1+b.PromptTokens+b.ResponseTokens:
		return config.Errorf("ctx", b.Ctx, "cannot hold prompt_tokens %d + response_tokens %d + 1 = %d: raise ctx or lower the budgets", b.PromptTokens, b.ResponseTokens, 1+b.PromptTokens+b.ResponseTokens)
	}
	return nil
}
