package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
)

// PEFT's file names for a LoRA adapter.
const (
	AdapterConfigFile  = "adapter_config.json"
	AdapterWeightsFile = "adapter_model.safetensors"
)

// LoRATargets are the module names a LoRA adapter may target: every
// Linear of the decoder layer.
var LoRATargets = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// LoRAModule is the low-rank update of one Linear W [out, in]:
// W + scale * B A, with A [r, in] and B [out, r], row-major float32.
type LoRAModule struct {
	In, Out int
	A, B    []float32
}

// Adapter is a LoRA adapter in PEFT's terms: rank R, LoRAAlpha (scale
// alpha/r), the target module names, and one LoRAModule per targeted
// Linear, keyed by its path in the base model
// ("model.layers.0.self_attn.q_proj").
type Adapter struct {
	R         int
	Alpha     float64
	Dropout   float64  // lora_dropout, recorded for training; inference ignores it
	Targets   []string // sorted short names, e.g. q_proj
	BaseModel string   // base_model_name_or_path written to adapter_config.json
	Modules   map[string]*LoRAModule
}

// Scale is alpha / r, the factor on B A (PEFT without rsLoRA).
func (ad *Adapter) Scale() float64 { return ad.Alpha / float64(ad.R) }

// modulePath is where a target sits in layer l.
func modulePath(l int, target string) string {
	switch target {
	case "gate_proj", "up_proj", "down_proj":
		return fmt.Sprintf("model.layers.%d.mlp.%s", l, target)
	}
	return fmt.Sprintf("model.layers.%d.self_attn.%s", l, target)
}

// moduleDims is (in, out) of a target Linear.
func moduleDims(a *Arch, target string) (int, int) {
	switch target {
	case "q_proj":
		return a.HiddenSize, a.QDim()
	case "k_proj", "v_proj":
		return a.HiddenSize, a.KVDim()
	case "o_proj":
		return a.QDim(), a.HiddenSize
	case "gate_proj", "up_proj":
		return a.HiddenSize, a.IntermediateSize
	case "down_proj":
		return a.IntermediateSize, a.HiddenSize
	}
	return 0, 0
}

// NewAdapter makes an adapter for a with A and B zero (B A = 0, the base
// model unchanged); the trainer initialises A.
func NewAdapter(a *Arch, r int, alpha float64, targets []string) (*Adapter, error) {
	if r <= 0 {
		return nil, fmt.Errorf("lora rank %d: want a positive rank", r)
	}
	ad := &Adapter{R: r, Alpha: alpha, Targets: slices.Clone(targets), Modules: map[string]*LoRAModule{}}
	sort.Strings(ad.Targets)
	for _, t := range ad.Targets {
		if !slices.Contains(LoRATargets, t) {
			return nil, fmt.Errorf("lora target %q: want some of %v", t, LoRATargets)
		}
		in, out := moduleDims(a, t)
		for l := range a.NumLayers {
			ad.Modules[modulePath(l, t)] = &LoRAModule{In: in, Out: out, A: make([]float32, r*in), B: make([]float32, out*r)}
		}
	}
	return ad, nil
}

// Check verifies that the adapter fits a: one module per target and
// layer, each with the Linear's dimensions.
func (ad *Adapter) Check(a *Arch) error {
	want := 0
	for _, t := range ad.Targets {
		in, out := moduleDims(a, t)
		if in == 0 {
			return fmt.Errorf("lora target %q: want some of %v", t, LoRATargets)
		}
		for l := range a.NumLayers {
			p := modulePath(l, t)
			m, ok := ad.Modules[p]
			if !ok {
				return otherBase{fmt.Errorf("lora adapter has no module for %s: it covers fewer layers or targets than the base model has", p)}
			}
			if m.In != in || m.Out != out || len(m.A) != ad.R*in || len(m.B) != out*ad.R {
				return otherBase{fmt.Errorf("lora module %s is [%d <- %d] with r %d, the base model's Linear is [%d <- %d]: the adapter was made for another base model", p, m.Out, m.In, ad.R, out, in)}
			}
			want++
		}
	}
	if len(ad.Modules) != want {
		return fmt.Errorf("lora adapter has %d modules, its targets %v over %d layers make %d", len(ad.Modules), ad.Targets, a.NumLayers, want)
	}
	return nil
}

// peftName is PEFT's tensor name for a module's A or B.
func peftName(path, ab string) string { return "base_model.model." + path + ".lora_" + ab + ".weight" }

var peftTensor = regexp.MustCompile(`^base_model\.model\.(model\.layers\.(\d+)\.(?:self_attn|mlp)\.([a-z_]+))\.lora_([AB])\.weight$`)

// adapterConfigKeys are the keys PEFT 0.21 writes in adapter_config.json
// with the values mlerl's adapters have (everything off but plain LoRA);
// WriteAdapter writes them all, so PEFT reads the file as it reads its own.
func adapterConfig(ad *Adapter) map[string]any {
	return map[string]any{
		"alora_invocation_tokens": nil, "alpha_pattern": map[string]any{}, "arrow_config": nil,
		"auto_mapping": nil, "base_model_name_or_path": ad.BaseModel, "bias": "none",
		"corda_config": nil, "ensure_weight_tying": false, "eva_config": nil, "exclude_modules": nil,
		"fan_in_fan_out": false, "inference_mode": true, "init_lora_weights": true, "kasa_config": nil,
		"layer_replication": nil, "layers_pattern": nil, "layers_to_transform": nil,
		"loftq_config": map[string]any{}, "lora_alpha": ad.Alpha, "lora_bias": false,
		"lora_dropout": ad.Dropout, "lora_ga_config": nil, "megatron_config": nil,
		"megatron_core": "megatron.core", "modules_to_save": nil, "monteclora_config": nil,
		"peft_type": "LORA", "peft_version": "0.21.2", "qalora_group_size": 16, "r": ad.R,
		"rank_pattern": map[string]any{}, "revision": nil, "target_modules": ad.Targets,
		"target_parameters": nil, "task_type": "CAUSAL_LM", "trainable_token_indices": nil,
		"use_bdlora": nil, "use_dora": false, "use_qalora": false, "use_rslora": false,
		"velora_config": nil,
	}
}

// adapterHarmless are adapter_config.json keys whose non-default values do
// not change what the adapter computes at inference.
var adapterHarmless = map[string]bool{
	"base_model_name_or_path": true, "revision": true, "inference_mode": true, "init_lora_weights": true,
	"peft_version": true, "auto_mapping": true, "lora_dropout": true, "megatron_core": true,
	"qalora_group_size": true, "task_type": true, "peft_type": true, "r": true, "lora_alpha": true,
	"target_modules": true, "bias": true,
}

// WriteAdapter writes ad in PEFT's layout into dir, which must not exist
// or be empty: adapter_config.json and adapter_model.safetensors (float32,
// PEFT's tensor names, A [r, in] and B [out, r]). The files are written
// into a temporary folder beside dir and renamed, so a failure leaves
// nothing behind.
func WriteAdapter(dir string, ad *Adapter) error {
	files, err := AdapterFiles(ad)
	if err != nil {
		return err
	}
	return writeFolder(dir, func(tmp string) error {
		for _, name := range []string{AdapterConfigFile, AdapterWeightsFile} {
			if err := os.WriteFile(filepath.Join(tmp, name), files[name], 0o644); err != nil {
				return err
			}
		}
		return nil
	})
}

// AdapterFiles are the contents of WriteAdapter's two files, by name
// (AdapterConfigFile, AdapterWeightsFile), for writers that store them
// elsewhere than a local folder (mlerl's checkpoints in a bucket).
func AdapterFiles(ad *Adapter) (map[string][]byte, error) {
	var ts []Tensor
	for p, m := range ad.Modules {
		ts = append(ts,
			Tensor{Name: peftName(p, "A"), DType: F32, Shape: []int{ad.R, m.In}, Data: m.A},
			Tensor{Name: peftName(p, "B"), DType: F32, Shape: []int{m.Out, ad.R}, Data: m.B})
	}
	cfg, err := json.MarshalIndent(adapterConfig(ad), "", "  ")
	if err != nil {
		return nil, err
	}
	var w bytes.Buffer
	if err := WriteSafetensors(&w, ts, map[string]string{"format": "pt"}); err != nil {
		return nil, err
	}
	return map[string][]byte{AdapterConfigFile: append(cfg, '\n'), AdapterWeightsFile: w.Bytes()}, nil
}

// ModulePath is where PEFT finds the Linear a LoRA target adapts in
// layer l ("q_proj" in layer 0: "model.layers.0.self_attn.q_proj"), the
// key of Adapter.Modules.
func ModulePath(l int, target string) string { return modulePath(l, target) }

// otherBase marks a refusal of an adapter whose tensors do not fit the
// base: its Linear shapes or layers are another model's.
type otherBase struct{ error }

func (e otherBase) Unwrap() error { return e.error }

// IsOtherBase reports whether err (from [ReadAdapter] or [Adapter.Check])
// refuses an adapter because it was made for another base model, as
// opposed to one whose own files are malformed or use a PEFT option
// mlerl does not implement: only the former is fixed by naming the right
// base.
func IsOtherBase(err error) bool {
	var ob otherBase
	return errors.As(err, &ob)
}

// ReadAdapter reads a PEFT LoRA adapter folder and checks it against the
// base architecture a: peft_type LORA, plain LoRA (no DoRA, rsLoRA,
// fan_in_fan_out, bias, modules_to_save, rank or alpha patterns), target
// modules among [LoRATargets], and one A and B of the right shapes per
// target and layer.
func ReadAdapter(dir string, a *Arch) (*Adapter, error) {
	cfgPath := filepath.Join(dir, AdapterConfigFile)
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s is missing: a PEFT adapter folder holds adapter_config.json and adapter_model.safetensors", cfgPath)
		}
		return nil, err
	}
	ad, err := parseAdapterConfig(cfgPath, raw)
	if err != nil {
		return nil, err
	}
	f, err := OpenFile(filepath.Join(dir, AdapterWeightsFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s is missing (an adapter_model.bin is not read: save with safe_serialization=True)", filepath.Join(dir, AdapterWeightsFile))
		}
		return nil, err
	}
	defer f.Close()
	ad.Modules = map[string]*LoRAModule{}
	for _, n := range f.Names() {
		m := peftTensor.FindStringSubmatch(n)
		if m == nil {
			return nil, fmt.Errorf("%s: tensor %q is not a LoRA A or B of a decoder Linear (PEFT names them base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight)", f.Path, n)
		}
		path, target, ab := m[1], m[3], m[4]
		l, _ := strconv.Atoi(m[2])
		if !slices.Contains(ad.Targets, target) || modulePath(l, target) != path {
			return nil, fmt.Errorf("%s: tensor %q is outside target_modules %v", f.Path, n, ad.Targets)
		}
		if l >= a.NumLayers {
			return nil, otherBase{fmt.Errorf("%s: tensor %q is past the base model's %d layers", f.Path, n, a.NumLayers)}
		}
		in, out := moduleDims(a, target)
		want := []int{ad.R, in}
		if ab == "B" {
			want = []int{out, ad.R}
		}
		v, info, err := f.Float32(n)
		if err != nil {
			return nil, err
		}
		if !slicesEqual(info.Shape, want) {
			// The Linear's side (A's columns, B's rows) is the base's; the
			// other is the adapter's own rank.
			if len(info.Shape) == 2 && (ab == "A" && info.Shape[1] == in || ab == "B" && info.Shape[0] == out) {
				return nil, fmt.Errorf("%s: tensor %q has shape %v, want %v: its rank is not adapter_config.json's r %d (the adapter's files disagree)", f.Path, n, info.Shape, want, ad.R)
			}
			return nil, otherBase{fmt.Errorf("%s: tensor %q has shape %v, want %v (r %d and the base model's Linear [%d <- %d]): the adapter was made for another base model", f.Path, n, info.Shape, want, ad.R, out, in)}
		}
		mod := ad.Modules[path]
		if mod == nil {
			mod = &LoRAModule{In: in, Out: out}
			ad.Modules[path] = mod
		}
		if ab == "A" {
			mod.A = v
		} else {
			mod.B = v
		}
	}
	for p, m := range ad.Modules {
		if m.A == nil || m.B == nil {
			return nil, fmt.Errorf("%s: module %s has only one of lora_A and lora_B", f.Path, p)
		}
	}
	if err := ad.Check(a); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return ad, nil
}

func parseAdapterConfig(path string, raw []byte) (*Adapter, error) {
	var c map[string]json.RawMessage
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	bad := func(k, why string) error {
		return fmt.Errorf("%s: field %q is %s: %s", path, k, short(c[k]), why)
	}
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(c[k], &s)
		return s
	}
	if str("peft_type") != "LORA" {
		return nil, bad("peft_type", "only LORA adapters are read")
	}
	if tt, ok := c["task_type"]; ok && !zeroJSON(tt) && str("task_type") != "CAUSAL_LM" {
		return nil, bad("task_type", "want CAUSAL_LM")
	}
	ad := &Adapter{Alpha: 8}
	var r float64
	if err := json.Unmarshal(c["r"], &r); err != nil || r < 1 || r != math.Trunc(r) {
		return nil, bad("r", "want a positive integer rank")
	}
	ad.R = int(r)
	if v, ok := c["lora_alpha"]; ok {
		if err := json.Unmarshal(v, &ad.Alpha); err != nil {
			return nil, bad("lora_alpha", "want a number")
		}
	}
	if v, ok := c["lora_dropout"]; ok && !zeroJSON(v) {
		if err := json.Unmarshal(v, &ad.Dropout); err != nil {
			return nil, bad("lora_dropout", "want a number")
		}
	}
	ad.BaseModel = str("base_model_name_or_path")
	if b := str("bias"); b != "" && b != "none" {
		return nil, bad("bias", "only bias \"none\" is supported")
	}
	var targets []string
	if err := json.Unmarshal(c["target_modules"], &targets); err != nil {
		return nil, bad("target_modules", fmt.Sprintf("want a list of module names among %v (a regex string is not read)", LoRATargets))
	}
	for _, t := range targets {
		if !slices.Contains(LoRATargets, t) {
			return nil, bad("target_modules", fmt.Sprintf("%q is not one of %v", t, LoRATargets))
		}
	}
	if len(targets) == 0 {
		return nil, bad("target_modules", "want at least one module")
	}
	sort.Strings(targets)
	ad.Targets = slices.Compact(targets)
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if adapterHarmless[k] || zeroJSON(c[k]) {
			continue
		}
		return nil, bad(k, "a PEFT option mlerl does not implement (it reads plain LoRA: no DoRA, rsLoRA, fan_in_fan_out, patterns or modules_to_save)")
	}
	return ad, nil
}

// writeFolder runs fill on a fresh temporary folder beside dir and renames
// it to dir; on any error the temporary folder is removed. dir must not
// exist, or be an empty folder.
func writeFolder(dir string, fill func(tmp string) error) error {
	if ents, err := os.ReadDir(dir); err == nil {
		if len(ents) > 0 {
			return fmt.Errorf("%s exists and is not empty: choose a new folder", dir)
		}
		if err := os.Remove(dir); err != nil {
			return err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return err
	}
	if err := fill(tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	return nil
}

func writeSafetensorsFile(path string, ts []Tensor, meta map[string]string) error {
	var buf bytes.Buffer
	if err := WriteSafetensors(&buf, ts, meta); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// scaledDelta returns scale * B A, [out, in], in float64.
func (m *LoRAModule) scaledDelta(r int, scale float64) []float64 {
	d := make([]float64, m.Out*m.In)
	for o := range m.Out {
		for k := range r {
			b := scale * float64(m.B[o*r+k])
			if b == 0 {
				continue
			}
			row := m.A[k*m.In : (k+1)*m.In]
			for i, a := range row {
				d[o*m.In+i] += b * float64(a)
			}
		}
	}
	return d
}
