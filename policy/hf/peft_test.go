package hf

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// loraMeta is testdata/lora/NAME/ref.json.
type loraMeta struct {
	Checkpoint string  `json:"checkpoint"`
	Adapter    string  `json:"adapter"`
	InputIDs   [][]int `json:"input_ids"`
	Mask       [][]int `json:"response_mask"`
	Loss       float64 `json:"loss"`
	GradNames  []string
}

var loraNames = []string{"qwen2", "qwen3"}

// sftLoss is the mean negative log-likelihood of the response tokens
// (mask[t] = 1) given the tokens before them, over the batch: the loss the
// references' gradients are of.
func sftLoss(r *Reference, ids [][]int, mask [][]int) (float64, error) {
	sum, n := 0.0, 0
	for b, seq := range ids {
		logits, err := r.Logits(seq)
		if err != nil {
			return 0, err
		}
		for t := 1; t < len(seq); t++ {
			if mask[b][t] == 0 {
				continue
			}
			row := logits[t-1]
			top := slices.Max(row)
			z := 0.0
			for _, v := range row {
				z += math.Exp(v - top)
			}
			sum += top + math.Log(z) - row[seq[t]]
			n++
		}
	}
	return sum / float64(n), nil
}

// TestLoRAMatchesPEFT: the adapter PEFT saved, read by ReadAdapter and
// applied by the reference, gives PEFT's adapted logits and SFT loss; the
// folder WriteMerged makes from it loads and gives merge_and_unload's.
func TestLoRAMatchesPEFT(t *testing.T) {
	for _, name := range loraNames {
		t.Run(name, func(t *testing.T) {
			var meta loraMeta
			readJSON(t, "testdata/lora/"+name+"/ref.json", &meta)
			c := loadCkpt(t, "testdata/"+meta.Checkpoint)
			ad, err := ReadAdapter("testdata/"+meta.Adapter, c.Arch)
			if err != nil {
				t.Fatal(err)
			}
			if ad.R != 4 || ad.Alpha != 8 || len(ad.Targets) != 7 || len(ad.Modules) != 7*c.Arch.NumLayers {
				t.Fatalf("adapter read as r %d alpha %g targets %v, %d modules", ad.R, ad.Alpha, ad.Targets, len(ad.Modules))
			}
			r, err := NewReference(c.Arch, c.Weights, ad)
			if err != nil {
				t.Fatal(err)
			}
			refPath := "testdata/lora/" + name + "/ref.safetensors"
			want, shape := refTensor(t, refPath, "logits_adapted")
			for b, ids := range meta.InputIDs {
				got, _ := r.Logits(ids)
				abs, rel := logitsDiff(got, want, b, shape[1], shape[2])
				t.Logf("adapted sequence %d: max |diff| %.3g, relative %.3g", b, abs, rel)
				if rel > 1e-4 {
					t.Errorf("adapted sequence %d: %.3g relative from PEFT's logits, want <= 1e-4", b, rel)
				}
			}
			loss, err := sftLoss(r, meta.InputIDs, meta.Mask)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(loss-meta.Loss) > 1e-5*meta.Loss {
				t.Errorf("SFT loss got %.8f, want %.8f (PyTorch)", loss, meta.Loss)
			}

			dir := filepath.Join(t.TempDir(), "merged")
			if err := WriteMerged(dir, c, ad, F32); err != nil {
				t.Fatal(err)
			}
			m := loadCkpt(t, dir)
			mr, err := NewReference(m.Arch, m.Weights, nil)
			if err != nil {
				t.Fatal(err)
			}
			wantM, _ := refTensor(t, refPath, "logits_merged")
			for b, ids := range meta.InputIDs {
				got, _ := mr.Logits(ids)
				if _, rel := logitsDiff(got, wantM, b, shape[1], shape[2]); rel > 1e-4 {
					t.Errorf("merged sequence %d: %.3g relative from merge_and_unload's logits, want <= 1e-4", b, rel)
				}
			}
		})
	}
}

// TestLoRAGradientsConsistent checks the autograd gradients committed for
// the native engine's tests against central differences of the float64
// reference's SFT loss, on a few entries of every kind of A and B: the
// references are the gradients of the loss they say they are.
func TestLoRAGradientsConsistent(t *testing.T) {
	name := "qwen3"
	var meta loraMeta
	readJSON(t, "testdata/lora/"+name+"/ref.json", &meta)
	c := loadCkpt(t, "testdata/"+meta.Checkpoint)
	ad, err := ReadAdapter("testdata/"+meta.Adapter, c.Arch)
	if err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile("testdata/lora/" + name + "/ref.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const h = 1e-3
	checked := 0
	for _, target := range LoRATargets {
		for _, ab := range []string{"A", "B"} {
			path := modulePath(1, target)
			grad, _, err := f.Float32("grad." + peftName(path, ab))
			if err != nil {
				t.Fatal(err)
			}
			m := ad.Modules[path]
			vals := m.A
			if ab == "B" {
				vals = m.B
			}
			// The entry with the largest gradient: its difference quotient
			// stands well above the float64 noise.
			k := 0
			for i, g := range grad {
				if math.Abs(float64(g)) > math.Abs(float64(grad[k])) {
					k = i
				}
			}
			old := vals[k]
			loss := func(v float32) float64 {
				vals[k] = v
				r, err := NewReference(c.Arch, c.Weights, ad)
				if err != nil {
					t.Fatal(err)
				}
				l, err := sftLoss(r, meta.InputIDs, meta.Mask)
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			// float32 steps: the adapter holds float32, so the step is exact.
			up, down := old+h, old-h
			num := (loss(up) - loss(down)) / float64(up-down)
			vals[k] = old
			if d := math.Abs(num - float64(grad[k])); d > 1e-3*math.Abs(float64(grad[k]))+1e-6 {
				t.Errorf("%s.lora_%s[%d]: autograd %.6g, central difference %.6g", path, ab, k, grad[k], num)
			}
			checked++
		}
	}
	if checked != 14 {
		t.Fatalf("checked %d gradients, want 14", checked)
	}
}

// TestAdapterRoundTrip: an adapter PEFT saved, written again by
// WriteAdapter, has PEFT's tensor names, shapes and values and every key of
// PEFT's adapter_config.json; ReadAdapter reads it back unchanged.
func TestAdapterRoundTrip(t *testing.T) {
	c := loadCkpt(t, "testdata/ckpt/qwen2")
	src := "testdata/lora/qwen2/adapter"
	ad, err := ReadAdapter(src, c.Arch)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "adapter")
	if err := WriteAdapter(out, ad); err != nil {
		t.Fatal(err)
	}
	pf, _ := OpenFile(filepath.Join(src, AdapterWeightsFile))
	defer pf.Close()
	gf, err := OpenFile(filepath.Join(out, AdapterWeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer gf.Close()
	if !slices.Equal(gf.Names(), pf.Names()) {
		t.Fatalf("tensor names got %v, want PEFT's %v", gf.Names(), pf.Names())
	}
	for _, n := range pf.Names() {
		pb, pi, _ := pf.Raw(n)
		gb, gi, _ := gf.Raw(n)
		if !bytes.Equal(pb, gb) || !slices.Equal(pi.Shape, gi.Shape) || pi.DType != gi.DType {
			t.Errorf("%s: got %s %v, want %s %v with the same bytes", n, gi.DType, gi.Shape, pi.DType, pi.Shape)
		}
	}
	keys := func(p string) []string {
		var m map[string]any
		readJSON(t, p, &m)
		var k []string
		for key := range m {
			k = append(k, key)
		}
		sort.Strings(k)
		return k
	}
	if got, want := keys(filepath.Join(out, AdapterConfigFile)), keys(filepath.Join(src, AdapterConfigFile)); !slices.Equal(got, want) {
		t.Errorf("adapter_config.json keys got %v, want PEFT's %v", got, want)
	}
	back, err := ReadAdapter(out, c.Arch)
	if err != nil {
		t.Fatal(err)
	}
	if back.R != ad.R || back.Alpha != ad.Alpha || !slices.Equal(back.Targets, ad.Targets) {
		t.Errorf("read back r %d alpha %g %v, want r %d alpha %g %v", back.R, back.Alpha, back.Targets, ad.R, ad.Alpha, ad.Targets)
	}
	for p, m := range ad.Modules {
		if !slices.Equal(back.Modules[p].A, m.A) || !slices.Equal(back.Modules[p].B, m.B) {
			t.Errorf("%s: values changed in the round trip", p)
		}
	}
	if err := WriteAdapter(out, ad); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("writing over a full folder: got %v, want a refusal", err)
	}
}

func TestReadAdapterRefusals(t *testing.T) {
	c := loadCkpt(t, "testdata/ckpt/qwen2")
	q3 := loadCkpt(t, "testdata/ckpt/qwen3")
	copyAdapter := func(t *testing.T, edit func(cfg map[string]any)) string {
		dir := t.TempDir()
		src := "testdata/lora/qwen2/adapter"
		w, _ := os.ReadFile(filepath.Join(src, AdapterWeightsFile))
		os.WriteFile(filepath.Join(dir, AdapterWeightsFile), w, 0o644)
		var cfg map[string]any
		readJSON(t, filepath.Join(src, AdapterConfigFile), &cfg)
		edit(cfg)
		b, _ := json.Marshal(cfg)
		os.WriteFile(filepath.Join(dir, AdapterConfigFile), b, 0o644)
		return dir
	}
	// otherBase: the refusal is the base's (IsOtherBase), which alone
	// makes the policy name the base the adapter must be made for.
	tests := []struct {
		name      string
		edit      func(cfg map[string]any)
		arch      *Arch
		want      string
		otherBase bool
	}{
		{"dora", func(m map[string]any) { m["use_dora"] = true }, c.Arch, `field "use_dora" is true`, false},
		{"rslora", func(m map[string]any) { m["use_rslora"] = true }, c.Arch, `field "use_rslora" is true`, false},
		{"layers_to_transform", func(m map[string]any) { m["layers_to_transform"] = []int{0} }, c.Arch, `field "layers_to_transform" is [0]`, false},
		{"fan_in_fan_out", func(m map[string]any) { m["fan_in_fan_out"] = true }, c.Arch, `"fan_in_fan_out"`, false},
		{"regex targets", func(m map[string]any) { m["target_modules"] = ".*proj" }, c.Arch, "a regex string is not read", false},
		{"unknown target", func(m map[string]any) { m["target_modules"] = []string{"q_proj", "lm_head"} }, c.Arch, `"lm_head" is not one of`, false},
		{"prefix tuning", func(m map[string]any) { m["peft_type"] = "PREFIX_TUNING" }, c.Arch, "only LORA", false},
		{"rank pattern", func(m map[string]any) { m["rank_pattern"] = map[string]any{"q_proj": 8} }, c.Arch, `field "rank_pattern"`, false},
		{"wrong rank", func(m map[string]any) { m["r"] = 8 }, c.Arch, "has shape [4 64], want [8 64]: its rank is not adapter_config.json's r 8", false},
		{"fewer targets", func(m map[string]any) { m["target_modules"] = []string{"q_proj"} }, c.Arch, "outside target_modules [q_proj]", false},
		{"other base", func(m map[string]any) {}, q3.Arch, "has shape [16 4], want [32 4]", true},
		{"fewer layers in the base", func(m map[string]any) {}, func() *Arch { a := *c.Arch; a.NumLayers = 1; return &a }(), "past the base model's 1 layers", true},
		{"more layers in the base", func(m map[string]any) {}, func() *Arch { a := *c.Arch; a.NumLayers = 3; return &a }(), "has no module for model.layers.2", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadAdapter(copyAdapter(t, tt.edit), tt.arch)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ReadAdapter error got %v, want one containing %q", err, tt.want)
			}
			if IsOtherBase(err) != tt.otherBase {
				t.Errorf("IsOtherBase(%q) = %v, want %v", err, !tt.otherBase, tt.otherBase)
			}
		})
	}
	if _, err := ReadAdapter(t.TempDir(), c.Arch); err == nil || !strings.Contains(err.Error(), "adapter_config.json is missing") {
		t.Errorf("empty folder: got %v, want adapter_config.json is missing", err)
	}
}

// TestWriteRoundTrip writes a Go-made adapter (NewAdapter with seeded
// values) and its merged folder; with MLERL_HF_ROUNDTRIP_DIR set it writes
// them there, with Go's logits, for `scripts/hf_reference.py check DIR` to
// load with PEFT and transformers. Without it, it checks that the merged
// folder (bf16) loads and agrees with the adapter applied on the fly.
func TestWriteRoundTrip(t *testing.T) {
	c := loadCkpt(t, "testdata/ckpt/qwen3")
	ad, err := NewAdapter(c.Arch, 2, 4, []string{"q_proj", "v_proj", "down_proj"})
	if err != nil {
		t.Fatal(err)
	}
	seed := uint32(12345)
	rnd := func() float32 { // xorshift: reproducible values in [-0.25, 0.25)
		seed ^= seed << 13
		seed ^= seed >> 17
		seed ^= seed << 5
		return float32(seed%1000)/2000 - 0.25
	}
	paths := make([]string, 0, len(ad.Modules))
	for p := range ad.Modules {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		for i := range ad.Modules[p].A {
			ad.Modules[p].A[i] = rnd()
		}
		for i := range ad.Modules[p].B {
			ad.Modules[p].B[i] = rnd()
		}
	}
	ad.BaseModel = "policy/hf/testdata/ckpt/qwen3"
	dir := os.Getenv("MLERL_HF_ROUNDTRIP_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := WriteAdapter(filepath.Join(dir, "adapter"), ad); err != nil {
		t.Fatal(err)
	}
	if err := WriteMerged(filepath.Join(dir, "merged"), c, ad, BF16); err != nil {
		t.Fatal(err)
	}
	r, err := NewReference(c.Arch, c.Weights, ad)
	if err != nil {
		t.Fatal(err)
	}
	ids := [][]int{{5, 70, 300, 12, 600, 9, 44, 101}}
	logits, _ := r.Logits(ids[0])
	b, _ := json.Marshal(map[string]any{"checkpoint": "ckpt/qwen3", "input_ids": ids, "logits": [][][]float64{logits}, "merged_tolerance": 0.05})
	if err := os.WriteFile(filepath.Join(dir, "go_logits.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	m := loadCkpt(t, filepath.Join(dir, "merged"))
	if info, _ := m.Weights.Info("model.layers.0.self_attn.q_proj.weight"); info.DType != BF16 {
		t.Errorf("merged q_proj is %s, want BF16", info.DType)
	}
	if m.Arch.DType != BF16 {
		t.Errorf("merged config dtype %s, want bfloat16", m.Arch.DType)
	}
	mr, err := NewReference(m.Arch, m.Weights, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := mr.Logits(ids[0])
	flat := make([]float32, 0, len(logits)*len(logits[0]))
	for _, row := range logits {
		for _, v := range row {
			flat = append(flat, float32(v))
		}
	}
	_, rel := logitsDiff(got, flat, 0, len(logits), len(logits[0]))
	t.Logf("bf16 merged folder vs adapter on the f32 base: relative %.3g", rel)
	if rel > 0.05 {
		t.Errorf("bf16 merged folder differs from the adapter on the fly by %.3g relative, want <= 0.05", rel)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, "merged", f)); err != nil {
			t.Errorf("merged folder lacks %s: %v", f, err)
		}
	}
}
