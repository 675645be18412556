package hf

// Qwen3 (Qwen3ForCausalLM): Llama's layers plus an RMSNorm over each head
// of q and k (weights q_norm, k_norm of width head_dim) before RoPE, and a
// head_dim that need not be hidden_size / num_attention_heads; no biases.
func init() {
	register(&family{
		modelType:    "qwen3",
		architecture: "Qwen3ForCausalLM",
		check: func(c *rawConfig, a *Arch) error {
			a.QKNorm = true
			if err := c.mustBe("attention_bias", false, "biases on q/k/v/o are not supported for Qwen3"); err != nil {
				return err
			}
			return c.slidingWindow()
		},
		layerExtra: func(a *Arch, p string, want map[string][]int) {
			want[p+"self_attn.q_norm.weight"] = []int{a.HeadDim}
			want[p+"self_attn.k_norm.weight"] = []int{a.HeadDim}
		},
	})
}
