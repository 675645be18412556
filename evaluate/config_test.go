package evaluate

import (
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/policy"
)

// TestConfigValidate pins the message for every field evaluate refuses.
func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		want string // the whole message; "" for valid
	}{
		{"default", func(*Config) {}, ""},
		{"no sft folder without sft", func(c *Config) { c.Methods, c.SFT = []string{MethodExpert}, "" }, ""},
		{"data", func(c *Config) { c.Data = "" }, `data "": must name the data root (a folder or gs://bucket/prefix)`},
		{"tasks", func(c *Config) { c.Tasks = "" }, `tasks "": must name the tasks dataset (name or name/vN)`},
		{"ideas", func(c *Config) { c.Ideas = "" }, `ideas "": must name the ideas dataset (name or name/vN)`},
		{"out", func(c *Config) { c.Out = "" }, `out "": must name the dataset to write`},
		{"no splits", func(c *Config) { c.Splits = nil }, "splits []: must name held-out, held-in or both"},
		{"bad split", func(c *Config) { c.Splits = []string{"held-out", "test"} }, `splits ["held-out", "test"]: item 2 "test" is not held-out or held-in`},
		{"split twice", func(c *Config) { c.Splits = []string{"held-in", "held-in"} }, `splits ["held-in", "held-in"]: "held-in" is listed twice`},
		{"no methods", func(c *Config) { c.Methods = []string{} }, "methods []: must name some of initial, random, expert, llm, sft, sft+ppo, policy"},
		{"bad method", func(c *Config) { c.Methods = []string{"ppo"} }, `methods ["ppo"]: item 1 "ppo" is not one of initial, random, expert, llm, sft, sft+ppo, policy`},
		{"a Hugging Face policy", func(c *Config) { c.Methods, c.Policy, c.Adapter = []string{"initial", "policy"}, "hf:/m/qwen", "/a" }, ""},
		{"policy not hf", func(c *Config) { c.Methods, c.Policy = []string{"policy"}, "/m/qwen" }, `policy "/m/qwen": want mlerl (mlerl's own model), hf:DIR (a Hugging Face checkpoint folder) or gguf:FILE (a GGUF model file)`},
		{"policy mlerl", func(c *Config) { c.Methods, c.Policy = []string{"policy"}, "mlerl" }, `policy "mlerl": names mlerl's own model, which is evaluated from its checkpoints (methods sft, sft+ppo): method policy prompts a pretrained model as it is (hf:DIR)`},
		{"a GGUF policy", func(c *Config) { c.Methods, c.Policy = []string{"initial", "policy"}, "gguf:/m/smollm2.gguf" }, ""},
		{"policy without a file", func(c *Config) { c.Methods, c.Policy = []string{"policy"}, "gguf:" }, `policy "gguf:": names no file: want gguf:FILE, a GGUF model file (llama.cpp's format)`},
		{"policy without a folder", func(c *Config) { c.Methods, c.Policy = []string{"policy"}, "hf: " }, `policy "hf: ": names no folder: want hf:DIR, the Hugging Face checkpoint folder that holds config.json`},
		{"policy not evaluated", func(c *Config) { c.Policy = "hf:/m/qwen" }, `policy "hf:/m/qwen": is evaluated as method policy: add it to methods (e.g. --methods initial,policy)`},
		{"method policy without policy", func(c *Config) { c.Methods = []string{"policy"} }, `methods ["policy"]: method policy evaluates the Hugging Face folder the policy key names: give --policy hf:DIR`},
		{"adapter without policy", func(c *Config) { c.Adapter = "/a" }, `adapter "/a": is a PEFT adapter of a Hugging Face model: it needs policy hf:DIR, its base`},
		{"budgets", func(c *Config) { c.Budgets.Ctx = 100 }, "model.ctx 100: cannot hold prompt_tokens 448 + response_tokens 160 + 1 = 609: raise ctx or lower the budgets"},
		{"method twice", func(c *Config) { c.Methods = []string{"sft", "expert", "sft"} }, `methods ["sft", "expert", "sft"]: "sft" is listed twice`},
		{"only", func(c *Config) { c.Only = []string{""} }, `only [""]: item 1 is empty: want task ids`},
		{"per_task", func(c *Config) { c.PerTask = 0 }, "per_task 0: must be at least 1"},
		{"policy_per_task", func(c *Config) { c.PolicyPerTask = 9 }, "policy_per_task 9: must be in [0, per_task] (0: per_task, which is 8)"},
		{"workers", func(c *Config) { c.Workers = -2 }, "workers -2: must not be negative (0: one per core)"},
		{"sft", func(c *Config) { c.SFT = "" }, `sft "": must name the SFT checkpoint folder (method sft is on)`},
		{"ppo", func(c *Config) { c.PPO = "" }, `ppo "": must name the PPO checkpoint folder (method sft+ppo is on)`},
		{"temperature", func(c *Config) { c.Temperature = -1 }, "temperature -1: must be a number >= 0 (0: greedy)"},
		{"top_p", func(c *Config) { c.TopP = 1.5 }, "top_p 1.5: must be in (0, 1]"},
		{"max_new_tokens", func(c *Config) { c.MaxNewTokens = -1 }, "max_new_tokens -1: must not be negative (0: the policy's response_tokens)"},
		{"engine", func(c *Config) { c.Engine = "cuda" }, `engine "cuda": want native or gomlx`},
		{"decode", func(c *Config) { c.Decode = "json" }, `decode "json": want constrained or free`},
		{"slip_rate", func(c *Config) { c.SlipRate = -0.1 }, "slip_rate -0.1: must be in [0, 1] (a probability per step)"},
		{"llm_temperature", func(c *Config) { c.LLMTemperature = -1 }, "llm_temperature -1: must be a number >= 0"},
		{"env.max_time", func(c *Config) { c.Env.MaxTime = 0 }, "env.max_time 0s: must be positive"},
		{"llm.timeout", func(c *Config) { c.LLM.Timeout = -time.Minute }, "llm.timeout -1m0s: must not be negative (0: 2m0s)"},
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		c.edit(&cfg)
		got := ""
		if err := cfg.Validate(); err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s: got %q want %q", c.name, got, c.want)
		}
	}
}

// TestLastStepNote: the report says what the policies are offered on a
// trajectory's last step, and nothing when no policy acts under the
// grammar.
func TestLastStepNote(t *testing.T) {
	policies := []*method{{name: MethodInitial}, {name: MethodSFT, batch: &policy.PolicyAgent{}}, {name: MethodPPO, batch: &policy.PolicyAgent{}}}
	cases := []struct {
		name                       string
		methods                    []*method
		decode                     string
		keep, afterEdit, afterUndo bool
		want                       string // a part of the note ("": none)
	}{
		{name: "default", methods: policies, want: "sft, sft+ppo: no edit or undo offered on a trajectory's last step (step 8)"},
		{name: "baselines only", methods: policies[:1], want: ""},
		{name: "free decoding", methods: policies, decode: policy.DecodeFree, want: ""},
		{name: "last_step_edits", methods: policies, keep: true, want: "edits and undos offered on a trajectory's last step (step 8) too"},
		{name: "undos run", methods: policies, afterUndo: true, want: "no edit offered on a trajectory's last step (step 8), where it could not change the score; undos are"},
		{name: "edits run", methods: policies, afterEdit: true, want: "no undo offered"},
		{name: "both run", methods: policies, afterEdit: true, afterUndo: true, want: ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Env.MaxSteps = 8
			cfg.Env.LastStepEdits, cfg.Env.ExecuteAfterEdit, cfg.Env.ExecuteAfterUndo = c.keep, c.afterEdit, c.afterUndo
			if c.decode != "" {
				cfg.Decode = c.decode
			}
			got := lastStepNote(cfg, c.methods)
			if c.want == "" && got != "" || !strings.Contains(got, c.want) {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}
