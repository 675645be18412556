package policy

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy/native"
)

// TestAutoPrecision: auto is bf16 exactly where the native engine's
// products run on AVX512_BF16, unless MLERL_AUTO_PRECISION forces it; an
// unknown forced value is an error naming the variable. fp32 and bf16
// resolve to themselves; other engines compute matmul auto in float32
// and refuse bf16.
func TestAutoPrecision(t *testing.T) {
	t.Setenv(AutoPrecisionEnv, "")
	want := MatmulFP32
	if native.BF16Faster() {
		want = MatmulBF16
	}
	if got, err := AutoPrecision(); got != want || err != nil {
		t.Errorf("auto on this CPU: %q, %v; want %q (BF16Faster %v)", got, err, want, native.BF16Faster())
	}
	for _, forced := range []string{MatmulBF16, MatmulFP32} {
		t.Setenv(AutoPrecisionEnv, " "+strings.ToUpper(forced))
		for _, mode := range []string{MatmulAuto, "", "AUTO"} {
			if got, err := ResolvePrecision(mode); got != forced || err != nil {
				t.Errorf("%s=%s: ResolvePrecision(%q) = %q, %v", AutoPrecisionEnv, forced, mode, got, err)
			}
		}
		if got, err := ResolveMatmul(EngineNative, MatmulAuto); got != forced || err != nil {
			t.Errorf("%s=%s: native matmul auto = %q, %v", AutoPrecisionEnv, forced, got, err)
		}
		if got, err := ResolveMatmul(EngineGoMLX, MatmulAuto); got != MatmulFP32 || err != nil {
			t.Errorf("%s=%s: gomlx matmul auto = %q, %v; want fp32", AutoPrecisionEnv, forced, got, err)
		}
		for _, explicit := range []string{MatmulFP32, MatmulBF16} {
			if got, err := ResolvePrecision(explicit); got != explicit || err != nil {
				t.Errorf("ResolvePrecision(%q) = %q, %v", explicit, got, err)
			}
		}
	}
	if _, err := ResolveMatmul(EngineGoMLX, MatmulBF16); err == nil || !strings.Contains(err.Error(), "native engine's") {
		t.Errorf("gomlx matmul bf16: %v, want a refusal", err)
	}
	if _, err := ResolvePrecision("fp16"); err == nil || !strings.Contains(err.Error(), "want auto, fp32 or bf16") {
		t.Errorf("ResolvePrecision(fp16): %v", err)
	}
	t.Setenv(AutoPrecisionEnv, "fp8")
	if _, err := ResolvePrecision(MatmulAuto); err == nil || !strings.Contains(err.Error(), AutoPrecisionEnv) {
		t.Errorf("%s=fp8: %v, want an error naming the variable", AutoPrecisionEnv, err)
	}
	if got, err := ResolvePrecision(MatmulFP32); got != MatmulFP32 || err != nil {
		t.Errorf("an explicit fp32 read the variable: %q, %v", got, err)
	}
}

// TestTuningResolved: base_storage auto resolves as auto does, to fp32
// with full_finetune (nothing frozen to store), and an unknown storage is
// an error naming the key.
func TestTuningResolved(t *testing.T) {
	t.Setenv(AutoPrecisionEnv, MatmulBF16)
	tu := DefaultTuning()
	if r, err := tu.Resolved(); r.BaseStorage != MatmulBF16 || err != nil {
		t.Errorf("auto with LoRA: %q, %v; want bf16", r.BaseStorage, err)
	}
	tu.FullFinetune = true
	if r, err := tu.Resolved(); r.BaseStorage != MatmulFP32 || err != nil {
		t.Errorf("auto with full_finetune: %q, %v; want fp32", r.BaseStorage, err)
	}
	tu.FullFinetune, tu.BaseStorage = false, "fp8"
	if _, err := tu.Resolved(); err == nil || !strings.Contains(err.Error(), "base_storage") {
		t.Errorf("base_storage fp8: %v", err)
	}
}

// TestHFFreshAdaptersEqualBase: on a Hugging Face policy, fresh adapters
// (B zero) change nothing, whatever the base's storage: the engine with
// adapters and the same base without them (frozen in bf16, as the LoRA
// model stores it) give the same logits bit for bit, with the products in
// the storage's precision, and the same generation (prefill of prompts
// sharing a row, then decoding steps).
func TestHFFreshAdaptersEqualBase(t *testing.T) {
	for _, storage := range []string{MatmulFP32, MatmulBF16} {
		t.Run("base="+storage, func(t *testing.T) {
			tu := DefaultTuning()
			tu.LoRA.Rank, tu.LoRA.Alpha, tu.LoRA.Dropout, tu.BaseStorage = 4, 8, 0, storage
			p, err := OpenHF(hfTestdata("ckpt", "qwen2"), hfBudgets(), tu, "")
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			lora, err := p.NewEngine(EngineNative, 3, nil)
			if err != nil {
				t.Fatal(err)
			}
			q := *p
			q.Model.LoRA = nil // the base, stored as the LoRA model's
			base, err := q.NewEngine(EngineNative, 3, nil)
			if err != nil {
				t.Fatal(err)
			}
			if n := lora.Config().NumParams() - base.Config().NumParams(); n <= 0 {
				t.Fatalf("the LoRA engine has %d more parameters than the base", n)
			}
			for _, e := range []Engine{lora, base} {
				if got, err := SetMatmul(e, storage); got != storage || err != nil {
					t.Fatalf("SetMatmul(%s): %q, %v", storage, got, err)
				}
			}
			// 24 positions: more than native's 8-row cut-off, so a bf16
			// base's products run in bf16.
			toks := []int32{601, 453, 301, 198, 82, 66, 262, 68, 280, 518, 602, 198, 601, 463, 596, 365, 47, 75, 365, 529, 16, 13, 260, 81}
			b, idx := positionsBatch(toks)
			var outs [2][]float32
			for i, e := range []Engine{lora, base} {
				l, v, err := e.Logits(b, idx)
				if err != nil {
					t.Fatal(err)
				}
				outs[i] = append(l, v...)
				d, err := e.NewDecoder(3)
				if err != nil {
					t.Fatal(err)
				}
				pl, err := d.Prefill([][]int32{toks[:12], toks[:12], toks[4:20]})
				if err != nil {
					t.Fatal(err)
				}
				outs[i] = append(outs[i], pl...)
				for step := range 3 {
					dl, err := d.Extend([][]int32{{toks[step]}, {toks[step+1]}, {toks[step+2]}})
					if err != nil {
						t.Fatal(err)
					}
					outs[i] = append(outs[i], dl...)
				}
				d.Close()
			}
			for i, w := range outs[1] {
				if math.Float32bits(outs[0][i]) != math.Float32bits(w) {
					t.Fatalf("output %d: %v with fresh adapters, %v without", i, outs[0][i], w)
				}
			}
		})
	}
}

// TestCheckpointAutoStorage: a LoRA checkpoint whose model.json says base
// storage auto (written before the stages resolved it) loads with auto
// resolved where it is read, and its engine builds.
func TestCheckpointAutoStorage(t *testing.T) {
	ctx := context.Background()
	p := openTiny(t, "qwen2", "")
	e, err := p.NewEngine(EngineNative, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := store.NewLocal(t.TempDir())
	if err := SaveCheckpoint(ctx, st, "ck", 1, e, Checkpoint{Config: map[string]string{}, Policy: p, State: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	key := "ck/" + StepFolder(1) + "/model.json"
	b, err := store.ReadAll(ctx, st, key)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["BaseStorage"] != MatmulFP32 {
		t.Fatalf("model.json records base storage %v, want fp32", m["BaseStorage"])
	}
	m["BaseStorage"] = MatmulAuto
	b, _ = json.Marshal(m)
	if err := store.WriteAll(ctx, st, key, b, store.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, forced := range []string{MatmulBF16, MatmulFP32} {
		t.Setenv(AutoPrecisionEnv, forced)
		ck, err := LoadCheckpoint(ctx, st, "ck/"+StepFolder(1), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if ck.Model.BaseStorage != forced {
			t.Errorf("auto with %s=%s loads as %q", AutoPrecisionEnv, forced, ck.Model.BaseStorage)
		}
		q, err := ck.OpenPolicy("")
		if err != nil {
			t.Fatal(err)
		}
		e2, _, err := ck.Engine(q, EngineNative, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := e2.Config().BaseStorage; got != forced {
			t.Errorf("the engine stores its base in %q, want %q", got, forced)
		}
		if ws, _ := TrainableWeights(e2); !slices.ContainsFunc(ws, func(w Tensor) bool { return strings.HasSuffix(w.Name, "lora_b") }) {
			t.Error("the reloaded engine has no adapters")
		}
		q.Close()
	}
}
