package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mlerl/mlerl/policy/gguf"
	"github.com/mlerl/mlerl/policy/hf"
	"github.com/mlerl/mlerl/policy/native"
)

// A Hugging Face checkpoint folder as a policy. policy/hf reads the folder
// (config.json per family: hf/llama.go, hf/qwen2.go, hf/qwen3.go; the
// tokenizer, the chat format, PEFT adapters), policy/native runs the
// shared layers; this file maps one onto the other: config.json's
// architecture onto Config, tensor names onto native's (policy/native's
// doc.go table), and adapters both ways.

// SystemPrompt is the system message of every chat-rendered prompt. The
// compact prompt already holds the task, the scores, the script and the
// answer's form, and the action grammar enforces the form, so the system
// message only says whose turn it is; it replaces the template's own
// default persona ("You are Qwen, created by Alibaba Cloud..."), which
// would take as many tokens and describe the wrong job. It is recorded in
// policy.json, so a checkpoint keeps the prompts it was trained on.
const SystemPrompt = "You are a machine-learning engineering agent. You improve a task's train.py one action at a time and answer in the format the user asks for."

// Source is what a Hugging Face policy's checkpoints record of where it
// came from (policy.json): the base folder or GGUF file and the hashes
// that tie the checkpoint to it, and how prompts were rendered.
type Source struct {
	// Kind is KindHF (a folder) or KindGGUF (a GGUF file).
	Kind string `json:"kind"`
	// Base is the checkpoint folder or GGUF file, absolute; ConfigSHA256
	// and TokenizerSHA256 are a folder's config.json's and
	// tokenizer.json's, FileSHA256 a GGUF file's (a split model's: its
	// shards' bytes one after the other; Base names the first shard),
	// checked whenever the checkpoint is loaded again.
	Base            string `json:"base"`
	Architecture    string `json:"architecture"`
	ConfigSHA256    string `json:"config_sha256,omitempty"`
	TokenizerSHA256 string `json:"tokenizer_sha256,omitempty"`
	FileSHA256      string `json:"file_sha256,omitempty"`
	// Chat is the chat format's kind, ChatDate the date Llama 3.1's
	// system header was rendered with (pinned at the first run, so that
	// prompts do not change with the day), System the system message.
	Chat     string `json:"chat"`
	ChatDate string `json:"chat_date,omitempty"`
	System   string `json:"system"`
	// Adapter is the PEFT adapter the run started from (--adapter), with
	// its adapter_model.safetensors' hash; empty: fresh adapters.
	Adapter       string `json:"adapter,omitempty"`
	AdapterSHA256 string `json:"adapter_sha256,omitempty"`
}

// Spec is the policy key that names the base: hf:DIR or gguf:FILE.
func (s *Source) Spec() string { return s.Kind + ":" + s.Base }

// OpenHF opens the Hugging Face checkpoint folder dir as a policy: its
// architecture and tensors (checked by hf.Load), tokenizer, chat format
// and stop ids; budgets gives Ctx, PromptTokens and ResponseTokens, and
// tuning how the weights train. adapter, when not empty, is a PEFT LoRA
// adapter folder the policy starts from (its rank, alpha, dropout and
// targets replace tuning's). Every refusal is one line naming the file or
// key and the fix; nothing is written.
func OpenHF(dir string, budgets Config, tuning Tuning, adapter string) (*Policy, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("policy hf:%s: %w", dir, err)
	}
	ck, err := hf.Load(abs)
	if err != nil {
		return nil, fmt.Errorf("policy hf:%s: %w", dir, err)
	}
	return openCheckpoint(KindHF, dir, ck, budgets, tuning, adapter)
}

// OpenSpec opens the pretrained policy a stage's policy key names
// (ParseSpec): every kind but mlerl's own model, whose weights exist only
// in its training checkpoints, opens through the Hugging Face code path
// (OpenHF's arguments and refusals; a GGUF file through OpenGGUF). New
// code that takes a pretrained policy comes here rather than to OpenHF, so
// that a new kind of spec is one case of ParseSpec and of this switch.
func OpenSpec(spec string, budgets Config, tuning Tuning, adapter string) (*Policy, error) {
	kind, path, err := ParseSpec(spec)
	if err != nil {
		return nil, fmt.Errorf("policy %q: %w", spec, err)
	}
	switch kind {
	case KindMLERL:
		return nil, fmt.Errorf("policy %q: mlerl's own model has no weights outside its training checkpoints: name a pretrained model (hf:DIR or gguf:FILE) or a checkpoint of `mlerl train`", spec)
	case KindGGUF:
		return OpenGGUF(path, budgets, tuning, adapter)
	}
	return OpenHF(path, budgets, tuning, adapter)
}

// SpecOf is the spec a Hugging Face policy was opened from, as
// ParseSpec reads it (its kind and absolute base); "mlerl" for mlerl's
// own model.
func (p *Policy) SpecOf() string {
	if p.Source == nil {
		return KindMLERL
	}
	return p.Source.Kind + ":" + p.Source.Base
}

// OpenGGUF opens the GGUF file path as a policy: policy/gguf reads it as
// the Hugging Face checkpoint it converts to (architecture, tensors
// dequantized, tokenizer and chat template from its metadata), which the
// policy then runs as OpenHF runs a folder; the rest is OpenHF's.
// policy.json records the file and its sha256.
func OpenGGUF(path string, budgets Config, tuning Tuning, adapter string) (*Policy, error) {
	ck, err := gguf.Load(path)
	if err != nil {
		return nil, fmt.Errorf("policy gguf:%s: %w", path, err)
	}
	return openCheckpoint(KindGGUF, path, ck, budgets, tuning, adapter)
}

// openCheckpoint makes the policy of an opened checkpoint (kind and name:
// the spec that named it, for errors).
func openCheckpoint(kind, name string, ck *hf.Checkpoint, budgets Config, tuning Tuning, adapter string) (*Policy, error) {
	p, err := newHF(kind, ck, budgets, tuning)
	if err != nil {
		ck.Close()
		return nil, fmt.Errorf("policy %s:%s: %w", kind, name, err)
	}
	if ck.Chat.DateToday {
		p.Source.ChatDate = time.Now().Format("02 Jan 2006")
	}
	p.pinChat()
	if adapter != "" {
		if err := p.useAdapter(adapter, tuning); err != nil {
			ck.Close()
			return nil, err
		}
	}
	return p, nil
}

// newHF builds the policy of an opened checkpoint (kind: KindHF or
// KindGGUF, what its Source records).
func newHF(kind string, ck *hf.Checkpoint, budgets Config, tuning Tuning) (*Policy, error) {
	a := ck.Arch
	cfg := Config{Vocab: a.VocabSize, DModel: a.HiddenSize, Heads: a.NumHeads, Layers: a.NumLayers, FFN: a.IntermediateSize,
		RoPEBase: a.RopeTheta, Ctx: budgets.Ctx, PromptTokens: budgets.PromptTokens, ResponseTokens: budgets.ResponseTokens,
		KVHeads: a.NumKVHeads, HeadSize: a.HeadDim, Norm: native.NormRMS, NormEps: a.RMSNormEps, FFNKind: native.FFNSwiGLU,
		NoQKVBias: !a.QKVBias, NoOutBias: true, NoFFNBias: true, NoLMBias: true, QKNorm: a.QKNorm, TiedEmbed: a.TieWordEmbeddings}
	if a.RopeScaling != nil {
		cfg.InvFreq = hf.InvFreq(a) // Llama 3's rescaled frequencies
	}
	if a.MaxPositionEmbeddings > 0 && cfg.Ctx > a.MaxPositionEmbeddings {
		return nil, fmt.Errorf("model.ctx %d exceeds config.json's max_position_embeddings %d: lower model.ctx and the budgets", cfg.Ctx, a.MaxPositionEmbeddings)
	}
	if err := tuning.apply(&cfg, kind+":"+ck.Dir); err != nil {
		return nil, err
	}
	if cfg.BaseStorage == StorageQuant && kind != KindGGUF {
		return nil, fmt.Errorf("base_storage %s keeps a GGUF file's quantized blocks; a Hugging Face folder holds float weights: use %s (or %s, %s) to quantize them on load", StorageQuant, StorageQ8_0, StorageQ4_0, StorageQ4_1)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	src := &Source{Kind: kind, Base: ck.Dir, Architecture: a.Architecture, Chat: ck.Chat.Kind, System: SystemPrompt}
	var err error
	if kind == KindGGUF {
		if src.FileSHA256, err = filesSHA256(ggufFiles(ck)); err != nil {
			return nil, err
		}
	} else {
		if src.ConfigSHA256, err = fileSHA256(filepath.Join(ck.Dir, "config.json")); err != nil {
			return nil, err
		}
		if src.TokenizerSHA256, err = fileSHA256(filepath.Join(ck.Dir, "tokenizer.json")); err != nil {
			return nil, err
		}
	}
	eot, ok := ck.Tokenizer.ID(ck.Chat.EndOfTurn)
	if !ok {
		return nil, fmt.Errorf("%s: the chat format's end of turn %q is not a token of tokenizer.json", ck.Chat.Source, ck.Chat.EndOfTurn)
	}
	p := &Policy{Model: cfg, Source: src, tok: ck.Tokenizer, hf: ck, eos: int32(eot)}
	p.setStops(ck.StopIDs())
	return p, nil
}

// setStops sets the stop ids (the end of turn among them) and the free
// decoding mask: the ids with text and the stops.
func (p *Policy) setStops(ids []int) {
	p.stops = []int32{p.eos}
	for _, id := range ids {
		p.stops = append(p.stops, int32(id))
	}
	slices.Sort(p.stops)
	p.stops = slices.Compact(p.stops)
	p.free = NewBitset(p.Model.Vocab)
	for id := range int32(min(p.hf.Tokenizer.VocabSize(), p.Model.Vocab)) {
		if p.TokenBytes(id) != nil {
			p.free.Set(id)
		}
	}
	for _, id := range p.stops {
		p.free.Set(id)
	}
}

// pinChat makes the chat format render Source's date: a template that
// writes today's date would otherwise give another prompt every day.
func (p *Policy) pinChat() {
	chat := *p.hf.Chat
	if chat.DateToday {
		chat.DateToday, chat.Date = false, p.Source.ChatDate
	}
	p.hf.Chat = &chat
}

// useAdapter makes the policy start from the PEFT adapter in dir: its
// shape replaces the tuning's LoRA.
func (p *Policy) useAdapter(dir string, tuning Tuning) error {
	if tuning.FullFinetune {
		return fmt.Errorf("adapter %s: full_finetune trains every weight of the base, the adapter trains LoRA: drop one of --adapter and --full_finetune", dir)
	}
	ad, err := hf.ReadAdapter(dir, p.hf.Arch)
	switch {
	case hf.IsOtherBase(err):
		return fmt.Errorf("adapter %s: %w (the adapter must be made for %s)", dir, err, p.Source.Base)
	case err != nil:
		// The adapter's own files: naming the base would mislead.
		return fmt.Errorf("adapter %s: %w", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	lo := LoRAConfig{Rank: ad.R, Alpha: ad.Alpha, Dropout: ad.Dropout, Targets: ad.Targets}.normalized()
	p.Model.LoRA, p.adapter = &lo, ad
	p.Source.Adapter = abs
	p.Source.AdapterSHA256, err = fileSHA256(filepath.Join(abs, hf.AdapterWeightsFile))
	return err
}

// openSource reopens the base of a checkpoint's policy: the folder or
// GGUF file policy.json names, checked against its hashes, with
// model.json's config.
func openSource(src *Source, model Config) (*Policy, error) {
	var ck *hf.Checkpoint
	var err error
	switch src.Kind {
	case KindHF:
		ck, err = hf.Load(src.Base)
	case KindGGUF:
		ck, err = gguf.Load(src.Base)
	default:
		return nil, fmt.Errorf("policy.json: kind %q: want %s or %s", src.Kind, KindHF, KindGGUF)
	}
	if err != nil {
		return nil, fmt.Errorf("the policy's base %s: %w (policy.json names it; restore it there)", src.Spec(), err)
	}
	fail := func(err error) (*Policy, error) {
		ck.Close()
		return nil, err
	}
	// Each hash's files, named in the refusal by the first.
	type hashed struct {
		files []string
		want  string
	}
	config, tok := filepath.Join(src.Base, "config.json"), filepath.Join(src.Base, "tokenizer.json")
	hashes := []hashed{{[]string{config}, src.ConfigSHA256}, {[]string{tok}, src.TokenizerSHA256}}
	if src.Kind == KindGGUF {
		hashes = []hashed{{ggufFiles(ck), src.FileSHA256}}
	}
	for _, f := range hashes {
		got, err := filesSHA256(f.files)
		if err != nil {
			return fail(err)
		}
		if got != f.want {
			return fail(fmt.Errorf("%s has changed since the checkpoint was trained on it (sha256 %.12s, policy.json records %.12s): restore the base the policy was trained from", f.files[0], got, f.want))
		}
	}
	p, err := newHF(src.Kind, ck, model, Tuning{FullFinetune: model.LoRA == nil, BaseStorage: MatmulFP32})
	if err != nil {
		return fail(err)
	}
	// model.json is what the checkpoint's tensors were trained as.
	p.Model = model
	p.Source.ChatDate, p.Source.System = src.ChatDate, src.System
	p.Source.Adapter, p.Source.AdapterSHA256 = src.Adapter, src.AdapterSHA256
	p.pinChat()
	return p, nil
}

// Close closes the base's weight files (nothing for mlerl's model).
func (p *Policy) Close() error {
	if p.hf != nil {
		return p.hf.Close()
	}
	return nil
}

// PromptMessages are a Hugging Face policy's prompt as chat messages:
// the system message (SystemPrompt, or the one a checkpoint's
// policy.json recorded) and the compact prompt as the user turn. The
// policy renders them with its checkpoint's chat template
// ([Policy.EncodePrompt]); the exports hand the same messages to
// LLaMA-Factory and verl (package dataset's policy prompt form), whose
// templates then render the tokens the policy reads in mlerl.
func PromptMessages(system, prompt string) []hf.Message {
	return []hf.Message{{Role: "system", Content: system}, {Role: "user", Content: prompt}}
}

// chatPrompt renders content as the user turn after the system message
// (PromptMessages), then the assistant's generation prompt; Qwen3's
// prompt ends with an empty think block, as its template writes it with
// enable_thinking false (the policy answers without reasoning).
func (p *Policy) chatPrompt(content string) ([]int32, error) {
	ids, err := p.hf.EncodeChat(PromptMessages(p.Source.System, content), true)
	if err != nil {
		return nil, err
	}
	if p.hf.Chat.Kind == hf.ChatMLQwen3 {
		t := p.hf.Tokenizer
		open, _ := t.ID("<think>")
		close, _ := t.ID("</think>")
		nl := t.EncodeOrdinary("\n\n")
		ids = append(append(append(append(ids, open), nl...), close), nl...)
	}
	return toInt32(ids), nil
}

func fileSHA256(path string) (string, error) {
	return filesSHA256([]string{path})
}

// ggufFiles are the files a GGUF checkpoint was read from: the file, or
// a split model's shards in order (gguf.File.Paths), whose bytes one
// after the other Source.FileSHA256 hashes.
func ggufFiles(ck *hf.Checkpoint) []string {
	if w, ok := ck.Weights.(*gguf.Weights); ok {
		return w.File().Paths()
	}
	return []string{ck.Dir}
}

// filesSHA256 is the sha256 of the files' bytes one after the other.
func filesSHA256(paths []string) (string, error) {
	h := sha256.New()
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return "", err
		}
		_, err = io.Copy(cleanVectorWriter{h}, f)
		f.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// cleanVectorWriter clears the vector registers' upper halves before each
// write: in a GOEXPERIMENT=simd build SHA-256's SSE code can run about 70
// times slower after other code left them dirty (measured on this Xeon:
// 113 MB filled by a plain Go loop hashed in 24.9 s, 0.56 s after
// archsimd.ClearAVXUpperBits, 0.35 s in a build without simd).
type cleanVectorWriter struct{ w io.Writer }

func (c cleanVectorWriter) Write(b []byte) (int, error) {
	clearVectorState()
	return c.w.Write(b)
}

// hfNames maps Hugging Face tensor names onto native's (doc.go's table);
// transpose marks Linear weights, [out, in] there and [in, out] here.
// The families share it: Qwen2's q/k/v biases and Qwen3's q/k norms are
// the rows only their checkpoints have.
var hfNames = []struct {
	re        *regexp.Regexp
	native    string
	transpose bool
}{
	{regexp.MustCompile(`^model\.embed_tokens\.weight$`), "/token_embed/embeddings", false},
	{regexp.MustCompile(`^model\.norm\.weight$`), "/ln_final/rms_normalization/gain", false},
	{regexp.MustCompile(`^lm_head\.weight$`), "/lm_head/dense/weights", true},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.input_layernorm\.weight$`), "/block_$1/ln_attn/rms_normalization/gain", false},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.post_attention_layernorm\.weight$`), "/block_$1/ln_ffn/rms_normalization/gain", false},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.self_attn\.([qkv])_proj\.weight$`), "/block_$1/$2/dense/weights", true},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.self_attn\.([qkv])_proj\.bias$`), "/block_$1/$2/dense/biases", false}, // Qwen2
	{regexp.MustCompile(`^model\.layers\.(\d+)\.self_attn\.o_proj\.weight$`), "/block_$1/out/dense/weights", true},
	{regexp.MustCompile(`^model\.layers\.(\d+)\.self_attn\.([qk])_norm\.weight$`), "/block_${1}/${2}_norm/rms_normalization/gain", false}, // Qwen3
	{regexp.MustCompile(`^model\.layers\.(\d+)\.mlp\.(gate|up|down)_proj\.weight$`), "/block_$1/ffn_$2/dense/weights", true},
}

// rotaryBuffer is a tensor some saves carry that nothing reads (RoPE's
// inverse frequencies, recomputed from config.json).
var rotaryBuffer = regexp.MustCompile(`rotary_emb\.inv_freq$`)

// nativeName maps a Hugging Face tensor name; ok is false for a name
// outside the table.
func nativeName(name string) (n string, transpose, ok bool) {
	for _, m := range hfNames {
		if m.re.MatchString(name) {
			return m.re.ReplaceAllString(name, m.native), m.transpose, true
		}
	}
	return "", false, false
}

// transposed returns the [cols, rows] transpose of the [rows, cols] v.
func transposed(v []float32, rows, cols int) []float32 {
	t := make([]float32, len(v))
	for r := range rows {
		for c := range cols {
			t[c*rows+r] = v[r*cols+c]
		}
	}
	return t
}

// loadBase streams the base's tensors, one at a time in native's names and
// layout (a Linear transposed once, here), into set, then the starting
// adapter's when there is one: the engine holds one copy of the base, in
// its own storage.
func (p *Policy) loadBase(set func(Tensor) error) error {
	w := p.hf.Weights
	blocks := p.blockFormats()
	for _, name := range w.Names() {
		if rotaryBuffer.MatchString(name) {
			continue
		}
		n, tr, ok := nativeName(name)
		if !ok {
			return fmt.Errorf("%s: tensor %s has no counterpart in the native engine", p.Source.Base, name)
		}
		if want := blocks[n]; want != "" {
			// Kept in its blocks: the rows as stored, the shape the
			// native one ([in, out] for a Linear).
			format, b, info, err := w.(blockTensors).Blocks(name)
			if err != nil {
				return err
			}
			if format == want {
				shape := slices.Clone(info.Shape)
				if tr {
					shape = []int{shape[1], shape[0]}
				}
				if err := set(Tensor{Name: n, Shape: shape, Blocks: b, Quant: format}); err != nil {
					return fmt.Errorf("%s: tensor %s: %w", p.Source.Base, name, err)
				}
				continue
			}
		}
		v, info, err := w.Float32(name)
		if err != nil {
			return err
		}
		shape := slices.Clone(info.Shape)
		if tr {
			v, shape = transposed(v, shape[0], shape[1]), []int{shape[1], shape[0]}
		}
		if err := set(Tensor{Name: n, Shape: shape, F32: v}); err != nil {
			return fmt.Errorf("%s: tensor %s: %w", p.Source.Base, name, err)
		}
	}
	if p.adapter != nil {
		for _, t := range adapterTensors(p.adapter) {
			if err := set(t); err != nil {
				return fmt.Errorf("adapter %s: %w", p.Source.Adapter, err)
			}
		}
	}
	return nil
}

// blockTensors is a GGUF file's weights (gguf.Weights): tensors it
// stores in quantized blocks come as they are.
type blockTensors interface {
	Blocks(name string) (format string, blocks []byte, info hf.TensorInfo, err error)
	StoredType(name string) (gguf.Type, bool)
}

// blockFormats is, by native name, the quantized format each base matrix
// is stored in under the policy's base_storage whose blocks the base
// file holds as they are (those load as blocks); matrices quantized on
// load from float values (q8_0 of a Hugging Face folder) are not listed.
func (p *Policy) blockFormats() map[string]string {
	st := p.Model.BaseStorage
	bt, ok := p.hf.Weights.(blockTensors)
	if !QuantizedStorage(st) || !ok {
		return nil
	}
	out := map[string]string{}
	for _, name := range p.hf.Weights.Names() {
		n, _, ok := nativeName(name)
		typ, stored := bt.StoredType(name)
		if !ok || !stored {
			continue
		}
		if f, ok := gguf.BlockFormat(typ); ok && (st == StorageQuant || st == f) {
			out[n] = f
		}
	}
	return out
}

// matrixStorage is native.Options.MatrixStorage under base_storage
// quant: each base matrix the GGUF file stores in quantized blocks, in
// the format the engine keeps them in (gguf.BlockFormat), by native name
// (the rest float32). nil for any
// other storage (one storage for every matrix).
func (p *Policy) matrixStorage() map[string]string {
	if p.Model.BaseStorage != StorageQuant {
		return nil
	}
	if m := p.blockFormats(); len(m) > 0 {
		return m
	}
	return map[string]string{}
}

// peftModules maps native's target names to PEFT's module names.
var peftModules = map[string]string{"q": "q_proj", "k": "k_proj", "v": "v_proj", "out": "o_proj", "ffn_gate": "gate_proj", "ffn_up": "up_proj", "ffn_down": "down_proj"}

// nativeTarget is the native target name of a PEFT module name.
func nativeTarget(module string) string {
	for n, m := range peftModules {
		if m == module {
			return n
		}
	}
	return ""
}

var modulePath = regexp.MustCompile(`^model\.layers\.(\d+)\.(?:self_attn|mlp)\.([a-z_]+)$`)

// adapterTensors are ad's A and B as native's lora_a [in, r] and lora_b
// [r, out] (PEFT's A [r, in] and B [out, r], transposed).
func adapterTensors(ad *hf.Adapter) []Tensor {
	var out []Tensor
	paths := make([]string, 0, len(ad.Modules))
	for path := range ad.Modules {
		paths = append(paths, path)
	}
	slices.Sort(paths)
	for _, path := range paths {
		m := ad.Modules[path]
		sm := modulePath.FindStringSubmatch(path)
		prefix := "/block_" + sm[1] + "/" + nativeTarget(sm[2]) + "/"
		out = append(out,
			Tensor{Name: prefix + "lora_a", Shape: []int{m.In, ad.R}, F32: transposed(m.A, ad.R, m.In)},
			Tensor{Name: prefix + "lora_b", Shape: []int{ad.R, m.Out}, F32: transposed(m.B, m.Out, ad.R)})
	}
	return out
}

// Adapter builds the PEFT adapter held in ws (an engine's weights, by
// native name) for this policy's base: base_model_name_or_path is the
// base folder. Nil without adapters (full fine-tuning).
func (p *Policy) Adapter(ws []Tensor) (*hf.Adapter, error) {
	lo := p.Model.LoRA
	if lo == nil || p.hf == nil {
		return nil, nil
	}
	var targets []string
	for _, t := range lo.Targets {
		targets = append(targets, t+"_proj")
	}
	ad, err := hf.NewAdapter(p.hf.Arch, lo.Rank, lo.Alpha, targets)
	if err != nil {
		return nil, err
	}
	ad.Dropout, ad.BaseModel = lo.Dropout, p.Source.Base
	byName := map[string]Tensor{}
	for _, t := range ws {
		byName[t.Name] = t
	}
	for path, m := range ad.Modules {
		sm := modulePath.FindStringSubmatch(path)
		l, _ := strconv.Atoi(sm[1])
		prefix := fmt.Sprintf("/block_%d/%s/", l, nativeTarget(sm[2]))
		a, b := byName[prefix+"lora_a"], byName[prefix+"lora_b"]
		if len(a.F32) != len(m.A) || len(b.F32) != len(m.B) {
			return nil, fmt.Errorf("policy: the engine's weights hold no adapter %s of rank %d", strings.TrimSuffix(prefix, "/"), lo.Rank)
		}
		m.A, m.B = transposed(a.F32, m.In, lo.Rank), transposed(b.F32, lo.Rank, m.Out)
	}
	return ad, nil
}

// WriteMerged writes the policy with the weights ws (an engine's, by
// native name) as a Hugging Face folder in the local folder dir, which
// must not exist or be empty: the base with the adapters merged in
// (W + alpha/r·B·A), or a fully fine-tuned model's own weights, in the
// base's dtype, with its config, tokenizer and generation files:
// transformers and vLLM load it as they load the base.
func (p *Policy) WriteMerged(dir string, ws []Tensor) error {
	if p.hf == nil {
		return fmt.Errorf("save_merged: mlerl's own model has no Hugging Face form; it needs a Hugging Face policy (--policy hf:DIR or gguf:FILE)")
	}
	dtype := p.hf.Arch.DType
	if dtype.Size() == 0 {
		dtype = hf.F32
	}
	weight, err := p.trainedWeights(ws)
	if err != nil {
		return err
	}
	return hf.WriteModel(dir, p.hf, weight, dtype)
}

// WriteGGUF writes the policy with the weights ws (as WriteMerged takes
// them; nil: the base with the adapter it was opened with, if any) as a
// GGUF file at path, its matrices as typ (gguf.F16, BF16, Q8_0 or F32):
// llama.cpp and the gguf package read it, and so does OpenGGUF.
func (p *Policy) WriteGGUF(path string, ws []Tensor, typ gguf.Type) error {
	if p.hf == nil {
		return fmt.Errorf("export gguf: mlerl's own model has no GGUF form; it needs a Hugging Face policy (--policy hf:DIR or gguf:FILE)")
	}
	weight, err := p.trainedWeights(ws)
	if err != nil {
		return err
	}
	name := filepath.Base(p.Source.Base) + " (mlerl)"
	return gguf.Export(path, p.hf, weight, typ, name)
}

// trainedWeights is the function that gives each base tensor (by its
// Hugging Face name) its trained value: with LoRA, the adapters in ws
// merged (W + alpha/r·B·A; ws nil: the adapter the policy was opened
// with); with full fine-tuning, ws's own values.
func (p *Policy) trainedWeights(ws []Tensor) (func(name string, stored []float32) ([]float32, error), error) {
	if p.Model.LoRA != nil {
		ad := p.adapter
		if ws != nil {
			var err error
			if ad, err = p.Adapter(ws); err != nil {
				return nil, err
			}
		}
		return hf.MergeFunc(p.hf, ad)
	}
	if ws == nil {
		return func(_ string, stored []float32) ([]float32, error) { return stored, nil }, nil
	}
	byName := map[string]Tensor{}
	for _, t := range ws {
		byName[t.Name] = t
	}
	return func(name string, stored []float32) ([]float32, error) {
		n, tr, ok := nativeName(name)
		if !ok {
			return nil, fmt.Errorf("tensor %s has no counterpart in the native engine", name)
		}
		t, ok := byName[n]
		if !ok {
			return nil, fmt.Errorf("the engine's weights have no %s (for %s)", n, name)
		}
		if tr {
			return transposed(t.F32, t.Shape[0], t.Shape[1]), nil
		}
		return t.F32, nil
	}, nil
}
