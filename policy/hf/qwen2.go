package hf

// Qwen2 (Qwen2ForCausalLM): Qwen2 and Qwen2.5. Llama's layers plus biases
// on the q, k and v projections (not on o); its configs carry
// sliding-window fields that must be switched off.
func init() {
	register(&family{
		modelType:    "qwen2",
		architecture: "Qwen2ForCausalLM",
		check: func(c *rawConfig, a *Arch) error {
			a.QKVBias = true
			return c.slidingWindow()
		},
		layerExtra: func(a *Arch, p string, want map[string][]int) {
			want[p+"self_attn.q_proj.bias"] = []int{a.QDim()}
			want[p+"self_attn.k_proj.bias"] = []int{a.KVDim()}
			want[p+"self_attn.v_proj.bias"] = []int{a.KVDim()}
		},
	})
}
