package policy

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestHFPolicyGomlx: a Hugging Face policy's GoMLX engine (engine gomlx,
// what train sft, train ppo and evaluate build) agrees with its native
// engine on each tiny checkpoint: the same Config (model.json), the
// same logits and values on the chat-rendered prompt, one SFT step with
// the same loss and gradient norm, the same logits after it, and a
// checkpoint's trainable tensors only (adapters and value head).
func TestHFPolicyGomlx(t *testing.T) {
	// Relative to the largest |value|, as TestGomlxArchAgreesWithNative's
	// (measured on the CPU: at most 8e-7 before and after the step). After
	// it Adam's first update is nearly lr·sign(g), which would amplify a
	// gradient's rounding near zero: a looser bound there.
	const tolOut, tolNorm, tolAfter = 2e-5, 1e-5, 1e-4
	for _, name := range []string{"llama", "qwen2", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			p := openTiny(t, name, "")
			lo := *p.Model.LoRA
			lo.Dropout = 0 // the engines draw different masks (engine_gomlx_hf.go)
			p.Model.LoRA = &lo
			nat, err := p.NewEngine(EngineNative, 7, nil)
			if err != nil {
				t.Fatal(err)
			}
			gx, err := p.NewEngine(EngineGoMLX, 7, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer gx.Close()
			nc, _ := json.Marshal(nat.Config())
			gc, _ := json.Marshal(gx.Config())
			if string(nc) != string(gc) {
				t.Errorf("Config:\ngot  %s\nwant %s", gc, nc)
			}
			toks, err := p.EncodePrompt("Task: tiny (t). Metric: accuracy, higher is better.\nAnswer with Reflection, Thought, Action, Action Input.\n")
			if err != nil {
				t.Fatal(err)
			}
			toks = toks[:min(len(toks), 48)]
			b, idx := positionsBatch(toks)
			compare := func(what string, tol float64) {
				t.Helper()
				nl, nv, err := nat.Logits(b, idx)
				if err != nil {
					t.Fatal(err)
				}
				gl, gv, err := gx.Logits(b, idx)
				if err != nil {
					t.Fatal(err)
				}
				d := relErr(gl, nl)
				t.Logf("%s: logits differ by %.2g (relative)", what, d)
				if d > tol {
					t.Errorf("%s: logits differ: relative %.2g", what, d)
				}
				if d := relErr(gv, nv); d > tol {
					t.Errorf("%s: values differ: relative %.2g", what, d)
				}
			}
			compare("before the step", tolOut)

			// One SFT step: the next token at every position.
			targets, weights := make([]int32, len(idx)), make([]float32, len(idx))
			for i := range idx {
				targets[i], weights[i] = toks[(i+1)%len(toks)], 1
			}
			loss := sftLoss(targets, weights, p.Model.Vocab)
			o := OptimConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.99, ClipNorm: 1}
			nat.SetOptim(o)
			gx.SetOptim(o)
			nl, nn, err := nat.TrainStep(b, idx, loss, o.LR)
			if err != nil {
				t.Fatal(err)
			}
			gl, gn, err := gx.TrainStep(b, idx, loss, o.LR)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(gl-nl) > 1e-5*math.Abs(nl) || math.Abs(gn-nn) > tolNorm*nn {
				t.Errorf("SFT step: loss %.7g, gradient norm %.7g; native %.7g, %.7g", gl, gn, nl, nn)
			}
			compare("after the step", tolAfter)

			ws, err := TrainableWeights(gx)
			if err != nil {
				t.Fatal(err)
			}
			nws, _ := TrainableWeights(nat)
			if len(ws) != len(nws) {
				t.Fatalf("%d trainable tensors, native %d", len(ws), len(nws))
			}
			for i, w := range ws {
				if w.Name != nws[i].Name {
					t.Errorf("trainable tensor %d is %s, native's %s", i, w.Name, nws[i].Name)
				}
				if !strings.Contains(w.Name, "lora_") && !strings.HasPrefix(w.Name, "/value_head/") {
					t.Errorf("trainable tensor %s: want adapters and the value head only", w.Name)
				}
			}
		})
	}
}
