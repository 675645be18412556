package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Arch is a decoder's architecture as config.json describes it, checked
// and with defaults resolved. The three families differ only in the flags
// at the end (see llama.go, qwen2.go, qwen3.go).
type Arch struct {
	// Architecture is config.json's architectures[0] ("LlamaForCausalLM").
	Architecture string
	// Family is the model_type: "llama", "qwen2" or "qwen3".
	Family string

	VocabSize        int // rows of the embedding (and LM head); may exceed the tokenizer's ids
	HiddenSize       int
	IntermediateSize int // the SwiGLU MLP's inner width
	NumLayers        int // num_hidden_layers
	NumHeads         int // num_attention_heads
	NumKVHeads       int // num_key_value_heads (grouped-query attention); defaults to NumHeads
	HeadDim          int // head_dim; defaults to HiddenSize / NumHeads
	RMSNormEps       float64
	RopeTheta        float64
	// RopeScaling is Llama 3's frequency scaling; nil for plain RoPE.
	RopeScaling           *RopeScaling
	TieWordEmbeddings     bool // the LM head is the embedding matrix
	MaxPositionEmbeddings int
	// DType is the checkpoint's dtype as config.json says (dtype or
	// torch_dtype); the tensors' own dtypes are what is read.
	DType DType

	BOSTokenID  *int  // nil when config.json has none
	EOSTokenIDs []int // config.json's eos_token_id, int or list

	// Family flags.
	QKVBias bool // q_proj, k_proj and v_proj have biases (Qwen2)
	QKNorm  bool // RMSNorm over each head of q and k before RoPE (Qwen3)
}

// RopeScaling is Llama 3's rope_scaling (rope_type "llama3"), the only
// scaling mlerl implements.
type RopeScaling struct {
	Type                          string  // "llama3"
	Factor                        float64 // stretch of the low frequencies
	LowFreqFactor                 float64
	HighFreqFactor                float64
	OriginalMaxPositionEmbeddings int
}

// QDim is the width of the query projection's output, NumHeads x HeadDim.
func (a *Arch) QDim() int { return a.NumHeads * a.HeadDim }

// KVDim is the width of the key and value projections' outputs.
func (a *Arch) KVDim() int { return a.NumKVHeads * a.HeadDim }

// family is what differs between the supported architectures.
type family struct {
	modelType    string
	architecture string
	// check reads and validates the family's own fields of config.json
	// into a (which holds the shared ones already).
	check func(c *rawConfig, a *Arch) error
	// layerExtra adds the family's own tensors of layer i to want.
	layerExtra func(a *Arch, prefix string, want map[string][]int)
}

var families = map[string]*family{}

func register(f *family) { families[f.architecture] = f }

// rawConfig holds config.json's fields by name, to tell absent from zero.
type rawConfig struct {
	path   string
	fields map[string]json.RawMessage
}

func (c *rawConfig) has(k string) bool {
	v, ok := c.fields[k]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

func (c *rawConfig) errorf(field, format string, args ...any) error {
	return fmt.Errorf("%s: field %q: %s", c.path, field, fmt.Sprintf(format, args...))
}

// int reads an integer field; def when absent or null.
func (c *rawConfig) int(k string, def int) (int, error) {
	if !c.has(k) {
		return def, nil
	}
	// strconv on the raw bytes: json.Number would also take "2", quoted.
	n, err := strconv.Atoi(strings.TrimSpace(string(c.fields[k])))
	if err != nil {
		return 0, c.errorf(k, "want an integer, got %s", short(c.fields[k]))
	}
	return n, nil
}

func (c *rawConfig) float(k string, def float64) (float64, error) {
	if !c.has(k) {
		return def, nil
	}
	var v float64
	if err := json.Unmarshal(c.fields[k], &v); err != nil {
		return 0, c.errorf(k, "want a number, got %s", c.fields[k])
	}
	return v, nil
}

func (c *rawConfig) bool(k string, def bool) (bool, error) {
	if !c.has(k) {
		return def, nil
	}
	var v bool
	if err := json.Unmarshal(c.fields[k], &v); err != nil {
		return false, c.errorf(k, "want true or false, got %s", c.fields[k])
	}
	return v, nil
}

func (c *rawConfig) str(k string) (string, error) {
	if !c.has(k) {
		return "", nil
	}
	var v string
	if err := json.Unmarshal(c.fields[k], &v); err != nil {
		return "", c.errorf(k, "want a string, got %s", c.fields[k])
	}
	return v, nil
}

// mustBe refuses a field whose value is present and not the one given
// (absent or null passes).
func (c *rawConfig) mustBe(k string, want any, why string) error {
	if !c.has(k) {
		return nil
	}
	var got any
	_ = json.Unmarshal(c.fields[k], &got)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return c.errorf(k, "is %s: %s", c.fields[k], why)
	}
	return nil
}

// refusedFields are fields of other architectures or features that change
// the computation (mixture of experts, quantisation, soft-capping...):
// present and not null, false, 0 or empty, they are refused.
var refusedFields = []string{
	"num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size",
	"shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers", "n_routed_experts",
	"quantization_config", "attn_logit_softcapping", "final_logit_softcapping",
	"no_rope_layers", "rope_interleaved", "use_qk_norm", "residual_multiplier",
	"embedding_multiplier", "logits_scaling", "attention_multiplier",
}

// ReadConfig reads and checks a config.json file.
func ReadConfig(path string) (*Arch, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseConfig(path, b)
}

// ParseConfig checks config.json's bytes (path names the file in errors):
// the architecture is one of LlamaForCausalLM, Qwen2ForCausalLM and
// Qwen3ForCausalLM, the activation silu, RoPE plain or Llama 3's, no
// sliding window, experts or quantisation; sizes positive and consistent.
// Each refusal is one line naming the file, the field and its value.
func ParseConfig(path string, data []byte) (*Arch, error) {
	c := &rawConfig{path: path}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&c.fields); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object: %w", path, err)
	}
	var archs []string
	if c.has("architectures") {
		if err := json.Unmarshal(c.fields["architectures"], &archs); err != nil {
			return nil, c.errorf("architectures", "want a list of names, got %s", c.fields["architectures"])
		}
	}
	if len(archs) != 1 {
		return nil, c.errorf("architectures", "is %v: want exactly one of %s", archs, supportedArchs())
	}
	fam, ok := families[archs[0]]
	if !ok {
		return nil, c.errorf("architectures", "is %q: mlerl runs %s", archs[0], supportedArchs())
	}
	a := &Arch{Architecture: archs[0], Family: fam.modelType}
	if mt, err := c.str("model_type"); err != nil {
		return nil, err
	} else if mt != fam.modelType {
		return nil, c.errorf("model_type", "is %q but architectures says %s (model_type %q)", mt, archs[0], fam.modelType)
	}
	for _, k := range refusedFields {
		if c.has(k) && !zeroJSON(c.fields[k]) {
			return nil, c.errorf(k, "is %s: a feature mlerl does not implement (it runs dense %s checkpoints only)", short(c.fields[k]), supportedArchs())
		}
	}
	var err error
	ints := []struct {
		k   string
		dst *int
	}{
		{"vocab_size", &a.VocabSize}, {"hidden_size", &a.HiddenSize}, {"intermediate_size", &a.IntermediateSize},
		{"num_hidden_layers", &a.NumLayers}, {"num_attention_heads", &a.NumHeads},
	}
	for _, f := range ints {
		if !c.has(f.k) {
			return nil, c.errorf(f.k, "is missing")
		}
		if *f.dst, err = c.int(f.k, 0); err != nil {
			return nil, err
		}
		if *f.dst <= 0 {
			return nil, c.errorf(f.k, "is %d: want a positive number", *f.dst)
		}
	}
	if a.NumKVHeads, err = c.int("num_key_value_heads", a.NumHeads); err != nil {
		return nil, err
	}
	if a.NumKVHeads <= 0 || a.NumHeads%a.NumKVHeads != 0 {
		return nil, c.errorf("num_key_value_heads", "is %d: want a positive divisor of num_attention_heads %d", a.NumKVHeads, a.NumHeads)
	}
	if a.HeadDim, err = c.int("head_dim", 0); err != nil {
		return nil, err
	}
	if a.HeadDim == 0 {
		if a.HiddenSize%a.NumHeads != 0 {
			return nil, c.errorf("hidden_size", "is %d, not a multiple of num_attention_heads %d, and head_dim is not given", a.HiddenSize, a.NumHeads)
		}
		a.HeadDim = a.HiddenSize / a.NumHeads
	}
	if a.HeadDim <= 0 || a.HeadDim%2 != 0 {
		return nil, c.errorf("head_dim", "is %d: want a positive even number (RoPE rotates pairs)", a.HeadDim)
	}
	if a.MaxPositionEmbeddings, err = c.int("max_position_embeddings", 2048); err != nil {
		return nil, err
	}
	if a.RMSNormEps, err = c.float("rms_norm_eps", 1e-6); err != nil {
		return nil, err
	}
	if !(a.RMSNormEps > 0) {
		return nil, c.errorf("rms_norm_eps", "is %g: want a positive number", a.RMSNormEps)
	}
	if act, err := c.str("hidden_act"); err != nil {
		return nil, err
	} else if act != "" && act != "silu" {
		return nil, c.errorf("hidden_act", "is %q: only silu (SwiGLU) is supported", act)
	}
	// transformers' default is untied for all three families.
	if a.TieWordEmbeddings, err = c.bool("tie_word_embeddings", false); err != nil {
		return nil, err
	}
	if err := c.rope(a); err != nil {
		return nil, err
	}
	if err := c.dtype(a); err != nil {
		return nil, err
	}
	if c.has("bos_token_id") {
		v, err := c.int("bos_token_id", 0)
		if err != nil {
			return nil, err
		}
		a.BOSTokenID = &v
	}
	if a.EOSTokenIDs, err = c.intOrList("eos_token_id"); err != nil {
		return nil, err
	}
	if err := fam.check(c, a); err != nil {
		return nil, err
	}
	return a, nil
}

// intOrList reads a field that may be an int, a list of ints or null.
func (c *rawConfig) intOrList(k string) ([]int, error) {
	if !c.has(k) {
		return nil, nil
	}
	if n, err := strconv.Atoi(strings.TrimSpace(string(c.fields[k]))); err == nil {
		return []int{n}, nil
	}
	var many []int
	if err := json.Unmarshal(c.fields[k], &many); err != nil {
		return nil, c.errorf(k, "want an integer or a list of integers, got %s", c.fields[k])
	}
	return many, nil
}

// rope reads rope_theta and rope_scaling (transformers 4's layout) or
// rope_parameters (transformers 5's, which holds rope_theta too).
func (c *rawConfig) rope(a *Arch) error {
	var err error
	if a.RopeTheta, err = c.float("rope_theta", 10000); err != nil {
		return err
	}
	field := "rope_scaling"
	raw, has := c.fields[field], c.has(field)
	if c.has("rope_parameters") {
		field, raw, has = "rope_parameters", c.fields["rope_parameters"], true
	}
	if !has {
		return nil
	}
	var p map[string]any
	if err := json.Unmarshal(raw, &p); err != nil {
		return c.errorf(field, "want an object, got %s", short(raw))
	}
	typ, _ := p["rope_type"].(string)
	if typ == "" {
		typ, _ = p["type"].(string) // the older spelling
	}
	if th, ok := p["rope_theta"]; ok {
		f, ok := th.(float64)
		if !ok || !(f > 0) {
			return c.errorf(field, "rope_theta is %v: want a positive number", th)
		}
		a.RopeTheta = f
	}
	if v, ok := p["partial_rotary_factor"]; ok && v != 1.0 {
		return c.errorf(field, "partial_rotary_factor is %v: only 1 (rotate the whole head) is supported", v)
	}
	switch typ {
	case "", "default":
		return nil
	case "llama3":
	default:
		return c.errorf(field, "rope_type is %q: only default and llama3 are supported", typ)
	}
	s := &RopeScaling{Type: typ}
	num := func(k string) (float64, error) {
		v, ok := p[k].(float64)
		if !ok || !(v > 0) {
			return 0, c.errorf(field, "%s is %v: llama3 scaling needs a positive number", k, p[k])
		}
		return v, nil
	}
	if s.Factor, err = num("factor"); err != nil {
		return err
	}
	if s.LowFreqFactor, err = num("low_freq_factor"); err != nil {
		return err
	}
	if s.HighFreqFactor, err = num("high_freq_factor"); err != nil {
		return err
	}
	if s.HighFreqFactor <= s.LowFreqFactor {
		return c.errorf(field, "high_freq_factor %v must exceed low_freq_factor %v", s.HighFreqFactor, s.LowFreqFactor)
	}
	orig, err := num("original_max_position_embeddings")
	if err != nil {
		return err
	}
	s.OriginalMaxPositionEmbeddings = int(orig)
	for k := range p {
		switch k {
		case "rope_type", "type", "rope_theta", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings", "partial_rotary_factor":
		default:
			return c.errorf(field, "has %q, which llama3 scaling does not use", k)
		}
	}
	a.RopeScaling = s
	return nil
}

func (c *rawConfig) dtype(a *Arch) error {
	a.DType = F32
	for _, k := range []string{"dtype", "torch_dtype"} {
		if !c.has(k) {
			continue
		}
		s, err := c.str(k)
		if err != nil {
			return err
		}
		d, err := ParseDType(s)
		if err != nil {
			return c.errorf(k, "%v", err)
		}
		a.DType = d
		return nil
	}
	return nil
}

// slidingWindow refuses a sliding-window attention that is switched on
// (Qwen2/Qwen3 write sliding_window even when use_sliding_window is false,
// which is how Qwen2.5's own configs ship).
func (c *rawConfig) slidingWindow() error {
	on, err := c.bool("use_sliding_window", false)
	if err != nil {
		return err
	}
	if on {
		return c.errorf("use_sliding_window", "is true: sliding-window attention is not supported; set it to false (Qwen2.5's own configs do) to run full attention")
	}
	if c.has("layer_types") {
		var lt []string
		if err := json.Unmarshal(c.fields["layer_types"], &lt); err != nil {
			return c.errorf("layer_types", "want a list of strings, got %s", short(c.fields["layer_types"]))
		}
		for i, t := range lt {
			if t != "full_attention" {
				return c.errorf("layer_types", "layer %d is %q: only full_attention is supported", i, t)
			}
		}
	}
	return nil
}

// zeroJSON reports whether a JSON value is null, false, 0, "" or empty.
func zeroJSON(raw json.RawMessage) bool {
	switch s := strings.TrimSpace(string(raw)); s {
	case "null", "false", "0", "0.0", `""`, "[]", "{}":
		return true
	}
	return false
}

var spaces = regexp.MustCompile(`\s+`)

// short renders a JSON value on one line, cut to 80 bytes.
func short(raw json.RawMessage) string {
	s := spaces.ReplaceAllString(strings.TrimSpace(string(raw)), " ")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

func supportedArchs() string {
	var n []string
	for k := range families {
		n = append(n, k)
	}
	sort.Strings(n)
	return strings.Join(n, ", ")
}

// ExpectedTensors returns every tensor a checkpoint of this architecture
// holds, with its shape, as transformers names them (Linear weights
// [out, in]). The LM head is there only when the embeddings are not tied.
func (a *Arch) ExpectedTensors() map[string][]int {
	H, I, V := a.HiddenSize, a.IntermediateSize, a.VocabSize
	want := map[string][]int{
		"model.embed_tokens.weight": {V, H},
		"model.norm.weight":         {H},
	}
	if !a.TieWordEmbeddings {
		want["lm_head.weight"] = []int{V, H}
	}
	fam := families[a.Architecture]
	for i := range a.NumLayers {
		p := fmt.Sprintf("model.layers.%d.", i)
		want[p+"input_layernorm.weight"] = []int{H}
		want[p+"post_attention_layernorm.weight"] = []int{H}
		want[p+"self_attn.q_proj.weight"] = []int{a.QDim(), H}
		want[p+"self_attn.k_proj.weight"] = []int{a.KVDim(), H}
		want[p+"self_attn.v_proj.weight"] = []int{a.KVDim(), H}
		want[p+"self_attn.o_proj.weight"] = []int{H, a.QDim()}
		want[p+"mlp.gate_proj.weight"] = []int{I, H}
		want[p+"mlp.up_proj.weight"] = []int{I, H}
		want[p+"mlp.down_proj.weight"] = []int{H, I}
		if fam != nil && fam.layerExtra != nil {
			fam.layerExtra(a, p, want)
		}
	}
	return want
}

// harmless are tensors some saves carry that the computation does not read
// (RoPE's inverse frequencies, recomputed from the config).
var harmless = regexp.MustCompile(`^model\.(layers\.\d+\.self_attn\.)?rotary_emb\.inv_freq$`)

var layerName = regexp.MustCompile(`^model\.layers\.(\d+)\.`)

// CheckTensors compares a set of tensors with the architecture: every
// expected tensor present with its shape, nothing unexpected (bar RoPE
// buffers). The error names the tensor, the config field it contradicts
// and the fix.
func (a *Arch) CheckTensors(w interface {
	Names() []string
	Info(string) (TensorInfo, bool)
}) error {
	want := a.ExpectedTensors()
	// The embedding first: its shape is the plainest statement of
	// vocab_size and hidden_size.
	if t, ok := w.Info("model.embed_tokens.weight"); ok && !slicesEqual(t.Shape, want["model.embed_tokens.weight"]) {
		return fmt.Errorf("config.json says vocab_size %d and hidden_size %d, but model.embed_tokens.weight has shape %v: the config does not belong to these weights", a.VocabSize, a.HiddenSize, t.Shape)
	}
	maxLayer := -1
	for _, n := range w.Names() {
		if m := layerName.FindStringSubmatch(n); m != nil {
			if l, _ := strconv.Atoi(m[1]); l > maxLayer {
				maxLayer = l
			}
		}
	}
	if maxLayer+1 != a.NumLayers && maxLayer >= 0 {
		return fmt.Errorf("config.json says num_hidden_layers %d, but the weights hold layers 0..%d: the config does not belong to these weights", a.NumLayers, maxLayer)
	}
	var missing []string
	for _, n := range modelOrder(want) {
		shape := want[n]
		t, ok := w.Info(n)
		if !ok {
			missing = append(missing, n)
			continue
		}
		if !slicesEqual(t.Shape, shape) {
			return fmt.Errorf("tensor %s has shape %v, config.json implies %v (%s): the config does not belong to these weights", n, t.Shape, shape, a.shapeWhy(n))
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		hint := ""
		if missing[0] == "lm_head.weight" {
			hint = "; config.json has tie_word_embeddings false: set it to true if the LM head is the embedding"
		}
		return fmt.Errorf("tensor %s is missing (and %d more)%s", missing[0], len(missing)-1, hint)
	}
	for _, n := range w.Names() {
		if _, ok := want[n]; ok || harmless.MatchString(n) {
			continue
		}
		if n == "lm_head.weight" && a.TieWordEmbeddings {
			return fmt.Errorf("tensor lm_head.weight is present but config.json has tie_word_embeddings true: set it to false if the head is its own matrix")
		}
		return fmt.Errorf("tensor %s is not part of a %s with this config: an unsupported feature or another architecture", n, a.Architecture)
	}
	return nil
}

// modelOrder lists want's tensor names in the order the model computes
// with them (the embedding, then layer by layer: norm, q, k, v, their
// biases and norms, o, norm, the MLP; then the final norm and the head),
// so that a config contradicting several tensors is refused naming the
// same one, the first the computation meets, on every run.
func modelOrder(want map[string][]int) []string {
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	rank := func(n string) (layer, pos int) {
		m := layerName.FindStringSubmatch(n)
		switch {
		case n == "model.embed_tokens.weight":
			return -1, 0
		case m == nil: // model.norm, lm_head
			return math.MaxInt, 0
		}
		layer, _ = strconv.Atoi(m[1])
		rest := n[len(m[0]):]
		for i, p := range layerOrder {
			if strings.HasPrefix(rest, p) {
				return layer, i
			}
		}
		return layer, len(layerOrder)
	}
	sort.Slice(names, func(i, j int) bool {
		li, pi := rank(names[i])
		lj, pj := rank(names[j])
		if li != lj {
			return li < lj
		}
		if pi != pj {
			return pi < pj
		}
		return names[i] < names[j]
	})
	return names
}

// layerOrder is the order of a layer's tensors in modelOrder, by the
// start of their names after "model.layers.N.".
var layerOrder = []string{"input_layernorm.", "self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj.", "self_attn.q_norm.", "self_attn.k_norm.",
	"self_attn.o_proj.", "post_attention_layernorm.", "mlp.gate_proj.", "mlp.up_proj.", "mlp.down_proj."}

// shapeWhy names the config fields a tensor's expected shape comes from.
func (a *Arch) shapeWhy(name string) string {
	switch {
	case strings.Contains(name, "q_proj"):
		return fmt.Sprintf("num_attention_heads %d x head_dim %d, hidden_size %d", a.NumHeads, a.HeadDim, a.HiddenSize)
	case strings.Contains(name, "k_proj"), strings.Contains(name, "v_proj"):
		return fmt.Sprintf("num_key_value_heads %d x head_dim %d, hidden_size %d", a.NumKVHeads, a.HeadDim, a.HiddenSize)
	case strings.Contains(name, "o_proj"):
		return fmt.Sprintf("hidden_size %d, num_attention_heads %d x head_dim %d", a.HiddenSize, a.NumHeads, a.HeadDim)
	case strings.Contains(name, "q_norm"), strings.Contains(name, "k_norm"):
		return fmt.Sprintf("head_dim %d", a.HeadDim)
	case strings.Contains(name, "mlp"):
		return fmt.Sprintf("intermediate_size %d, hidden_size %d", a.IntermediateSize, a.HiddenSize)
	case strings.Contains(name, "norm"):
		return fmt.Sprintf("hidden_size %d", a.HiddenSize)
	}
	return fmt.Sprintf("vocab_size %d, hidden_size %d", a.VocabSize, a.HiddenSize)
}

func slicesEqual(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// InvFreq returns RoPE's inverse frequencies, one per pair of a head's
// dimensions: theta^(-2i/head_dim), then Llama 3's scaling when set (high
// frequencies kept, low ones divided by factor, a smooth blend between).
// Pairs are laid out as transformers' rotate_half does: dimension i pairs
// with i + head_dim/2.
func InvFreq(a *Arch) []float64 {
	half := a.HeadDim / 2
	inv := make([]float64, half)
	for i := range inv {
		inv[i] = 1 / math.Pow(a.RopeTheta, float64(2*i)/float64(a.HeadDim))
	}
	s := a.RopeScaling
	if s == nil {
		return inv
	}
	old := float64(s.OriginalMaxPositionEmbeddings)
	lowWave := old / s.LowFreqFactor
	highWave := old / s.HighFreqFactor
	for i, f := range inv {
		wave := 2 * math.Pi / f
		switch {
		case wave < highWave:
		case wave > lowWave:
			inv[i] = f / s.Factor
		default:
			smooth := (old/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
			inv[i] = (1-smooth)*f/s.Factor + smooth*f
		}
	}
	return inv
}
