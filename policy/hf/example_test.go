package hf_test

import (
	"fmt"
	"log"

	"github.com/mlerl/mlerl/policy/hf"
)

// Open a checkpoint folder, render a prompt in its own chat format and
// run the reference forward pass on it.
func ExampleLoad() {
	c, err := hf.Load("testdata/ckpt/qwen2")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	a := c.Arch
	fmt.Printf("%s: %d layers, %d heads (%d for k/v) of %d, tied head %v\n", a.Architecture, a.NumLayers, a.NumHeads, a.NumKVHeads, a.HeadDim, a.TieWordEmbeddings)
	msgs := []hf.Message{{Role: "user", Content: "Which action?"}}
	text, _ := c.Chat.Render(msgs, true)
	fmt.Printf("%q\n", text)
	ids, _ := c.EncodeChat(msgs, true)
	logits, err := hf.ReferenceLogits(c, ids)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(ids) == len(logits), len(logits[0]))
	// Output:
	// Qwen2ForCausalLM: 2 layers, 4 heads (2 for k/v) of 8, tied head true
	// "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhich action?<|im_end|>\n<|im_start|>assistant\n"
	// true 640
}
