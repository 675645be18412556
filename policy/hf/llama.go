package hf

// Llama (LlamaForCausalLM): Llama 3.x, SmolLM2. The shared layers with no
// biases; Llama 3.1's RoPE scaling is read by config.go since Qwen configs
// may carry it too.
func init() {
	register(&family{
		modelType:    "llama",
		architecture: "LlamaForCausalLM",
		check: func(c *rawConfig, a *Arch) error {
			// Biases on the projections exist in transformers' Llama but in
			// no checkpoint mlerl targets; refused rather than half-supported.
			if err := c.mustBe("attention_bias", false, "biases on q/k/v/o are not supported for Llama"); err != nil {
				return err
			}
			return c.mustBe("mlp_bias", false, "biases on the MLP are not supported")
		},
	})
}
