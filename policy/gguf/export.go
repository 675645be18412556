package gguf

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/mlerl/mlerl/internal/tokenizer"
	"github.com/mlerl/mlerl/policy/hf"
)

// Export writes the checkpoint ck as a GGUF file at path (which must not
// exist), every tensor passed through weight first (a trained model's
// values, adapters merged: hf.MergeFunc), the matrices as typ (F32, F16,
// BF16 or Q8_0; Q8_0 falls back to F16 for a matrix whose rows are not a
// whole number of its 32-value blocks, as llama.cpp's converter does) and
// norms and biases as F32. The metadata is what llama.cpp reads:
// general.*, the architecture's hyperparameters, the tokenizer as
// tokenizer.ggml.* (from tokenizer.json: tokens by id, types, merges,
// special ids, the pre-tokenizer's llama.cpp name) and the chat template.
// llama's Q and K rows are reordered for llama.cpp's RoPE. name is
// general.name. A failure leaves nothing behind.
func Export(path string, ck *hf.Checkpoint, weight func(name string, stored []float32) ([]float32, error), typ Type, name string) error {
	a := ck.Arch
	fam, ok := familyOf(a.Family)
	if !ok {
		return fmt.Errorf("export gguf: architecture %s has no GGUF form mlerl writes", a.Architecture)
	}
	switch {
	case typ != F32 && typ != F16 && typ != BF16 && typ != Q8_0:
		return fmt.Errorf("export gguf: type %s: want f32, f16, bf16 or q8_0", typ)
	case a.RopeScaling != nil:
		return fmt.Errorf("export gguf: %s uses Llama 3.1's RoPE scaling, which llama.cpp reads from a rope_freqs tensor mlerl does not write yet", ck.Dir)
	}
	meta, err := exportMeta(ck, fam, typ, name)
	if err != nil {
		return err
	}
	var tensors []Tensor
	for _, hfName := range exportOrder(ck.Weights.Names()) {
		g, ok := ggufName(hfName, fam)
		if !ok {
			if strings.HasSuffix(hfName, "rotary_emb.inv_freq") {
				continue // recomputed from the hyperparameters
			}
			return fmt.Errorf("export gguf: tensor %s has no GGUF name", hfName)
		}
		v, info, err := ck.Weights.Float32(hfName)
		if err != nil {
			return err
		}
		if v, err = weight(hfName, v); err != nil {
			return err
		}
		if len(v) != info.Elems() {
			return fmt.Errorf("export gguf: tensor %s: %d values for shape %v", hfName, len(v), info.Shape)
		}
		if fam.permuted && (strings.HasSuffix(g, ".attn_q.weight") || strings.HasSuffix(g, ".attn_k.weight")) {
			heads := a.NumHeads
			if strings.HasSuffix(g, ".attn_k.weight") {
				heads = a.NumKVHeads
			}
			if v, err = permuteRows(v, info.Shape, heads, true); err != nil {
				return fmt.Errorf("export gguf: tensor %s: %w", hfName, err)
			}
		}
		t := typ
		if len(info.Shape) != 2 {
			t = F32 // norms and biases, as llama.cpp keeps them
		} else if t == Q8_0 && info.Shape[1]%32 != 0 {
			t = F16
		}
		data, err := Encode(v, t)
		if err != nil {
			return fmt.Errorf("export gguf: tensor %s: %w", hfName, err)
		}
		tensors = append(tensors, Tensor{Name: g, Shape: info.Shape, Type: t, Data: data})
	}
	if err := WriteFile(path, meta, tensors); err != nil {
		return fmt.Errorf("export gguf: %w", err)
	}
	return nil
}

// familyOf finds a family by its model_type.
func familyOf(modelType string) (family, bool) {
	f, ok := families[modelType]
	return f, ok
}

// ggufName is a Hugging Face tensor name's GGUF name.
func ggufName(hfName string, fam family) (string, bool) {
	for g, h := range globalTensors {
		if h == hfName {
			return g, true
		}
	}
	m := hfLayer.FindStringSubmatch(hfName)
	if m == nil {
		return "", false
	}
	for _, table := range []map[string]string{layerTensors, fam.layerTensors} {
		for g, h := range table {
			if h == m[2] {
				return "blk." + m[1] + "." + g, true
			}
		}
	}
	return "", false
}

var hfLayer = regexp.MustCompile(`^model\.layers\.(\d+)\.(.+)$`)

// exportOrder sorts names as llama.cpp's converter writes them: the
// embedding, the blocks in order, then the final norm and the head.
func exportOrder(names []string) []string {
	out := slices.Clone(names)
	rank := func(n string) (int, int, string) {
		if m := hfLayer.FindStringSubmatch(n); m != nil {
			l, _ := strconv.Atoi(m[1])
			return 1, l, m[2]
		}
		switch n {
		case "model.embed_tokens.weight":
			return 0, 0, n
		case "model.norm.weight":
			return 2, 0, n
		}
		return 3, 0, n
	}
	slices.SortFunc(out, func(x, y string) int {
		gx, lx, sx := rank(x)
		gy, ly, sy := rank(y)
		if gx != gy {
			return gx - gy
		}
		if lx != ly {
			return lx - ly
		}
		return strings.Compare(sx, sy)
	})
	return out
}

// llama.cpp's general.file_type (llama_ftype) of each written type.
var fileTypes = map[Type]uint32{F32: 0, F16: 1, Q8_0: 7, BF16: 32}

func exportMeta(ck *hf.Checkpoint, fam family, typ Type, name string) ([]KV, error) {
	a := ck.Arch
	arch := a.Family
	k := func(s string) string { return arch + "." + s }
	meta := []KV{
		{"general.architecture", String(arch)},
		{"general.type", String("model")},
		{"general.name", String(name)},
		{"general.file_type", Uint32(fileTypes[typ])},
		{"general.quantization_version", Uint32(2)},
		{k("context_length"), Uint32(uint32(a.MaxPositionEmbeddings))},
		{k("embedding_length"), Uint32(uint32(a.HiddenSize))},
		{k("block_count"), Uint32(uint32(a.NumLayers))},
		{k("feed_forward_length"), Uint32(uint32(a.IntermediateSize))},
		{k("attention.head_count"), Uint32(uint32(a.NumHeads))},
		{k("attention.head_count_kv"), Uint32(uint32(a.NumKVHeads))},
		{k("rope.freq_base"), Float32(float32(a.RopeTheta))},
		{k("attention.layer_norm_rms_epsilon"), Float32(float32(a.RMSNormEps))},
		{k("vocab_size"), Uint32(uint32(a.VocabSize))},
	}
	if arch == "llama" {
		meta = append(meta, KV{k("rope.dimension_count"), Uint32(uint32(a.HeadDim))})
	}
	if arch == "qwen3" || a.HeadDim*a.NumHeads != a.HiddenSize {
		meta = append(meta, KV{k("attention.key_length"), Uint32(uint32(a.HeadDim))}, KV{k("attention.value_length"), Uint32(uint32(a.HeadDim))})
	}
	tok, err := tokenizerMeta(ck)
	if err != nil {
		return nil, err
	}
	meta = append(meta, tok...)
	if ck.Chat != nil && ck.Chat.Template != "" {
		meta = append(meta, KV{"tokenizer.chat_template", String(ck.Chat.Template)})
	}
	return meta, nil
}

// tokenizerJSONIn is what the exporter reads of tokenizer.json.
type tokenizerJSONIn struct {
	AddedTokens []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Model        struct {
		Type   string          `json:"type"`
		Vocab  map[string]int  `json:"vocab"`
		Merges json.RawMessage `json:"merges"`
	} `json:"model"`
}

// tokenizerMeta is tokenizer.ggml.* of the checkpoint's tokenizer.json,
// as llama.cpp's converter writes it for a byte-level BPE: a token per id
// up to vocab_size (the embedding's padding rows as [PADn], unused).
func tokenizerMeta(ck *hf.Checkpoint) ([]KV, error) {
	raw, err := ck.ReadFile("tokenizer.json")
	if err != nil {
		return nil, fmt.Errorf("export gguf: %w", err)
	}
	var t tokenizerJSONIn
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("export gguf: tokenizer.json: %w", err)
	}
	pre, err := preName(t.PreTokenizer)
	if err != nil {
		return nil, fmt.Errorf("export gguf: tokenizer.json: %w", err)
	}
	n := ck.Arch.VocabSize
	tokens := make([]string, n)
	types := make([]int32, n)
	for s, id := range t.Model.Vocab {
		if id < 0 || id >= n {
			return nil, fmt.Errorf("export gguf: tokenizer.json: token %q has id %d outside vocab_size %d", s, id, n)
		}
		tokens[id], types[id] = s, tokenNormal
	}
	for _, at := range t.AddedTokens {
		if at.ID < 0 || at.ID >= n {
			return nil, fmt.Errorf("export gguf: tokenizer.json: added token %q has id %d outside vocab_size %d", at.Content, at.ID, n)
		}
		tokens[at.ID], types[at.ID] = at.Content, tokenUserDefined
		if at.Special {
			types[at.ID] = tokenControl
		}
	}
	for id := range tokens {
		if types[id] == 0 {
			tokens[id], types[id] = fmt.Sprintf("[PAD%d]", id), tokenUnused
		}
	}
	merges, err := mergeStrings(t.Model.Merges)
	if err != nil {
		return nil, fmt.Errorf("export gguf: tokenizer.json: model.merges: %w", err)
	}
	meta := []KV{
		{"tokenizer.ggml.model", String("gpt2")},
		{"tokenizer.ggml.pre", String(pre)},
		{"tokenizer.ggml.tokens", Strings(tokens)},
		{"tokenizer.ggml.token_type", Int32s(types)},
		{"tokenizer.ggml.merges", Strings(merges)},
	}
	cfg := map[string]json.RawMessage{}
	if b, err := ck.ReadFile("tokenizer_config.json"); err == nil {
		_ = json.Unmarshal(b, &cfg)
	}
	special := func(field string) (int, bool) {
		v, ok := cfg[field]
		if !ok {
			return 0, false
		}
		var s string
		if json.Unmarshal(v, &s) != nil {
			var o struct{ Content string }
			if json.Unmarshal(v, &o) != nil {
				return 0, false
			}
			s = o.Content
		}
		id, ok := ck.Tokenizer.ID(s)
		return id, ok && s != ""
	}
	if ck.BOSTokenID != nil {
		meta = append(meta, KV{"tokenizer.ggml.bos_token_id", Uint32(uint32(*ck.BOSTokenID))})
	} else if id, ok := special("bos_token"); ok {
		meta = append(meta, KV{"tokenizer.ggml.bos_token_id", Uint32(uint32(id))})
	}
	eos := -1
	if len(ck.EOSTokenIDs) > 0 {
		eos = ck.EOSTokenIDs[0]
	} else if id, ok := special("eos_token"); ok {
		eos = id
	}
	if eos < 0 {
		return nil, fmt.Errorf("export gguf: %s names no eos_token_id: llama.cpp needs one", ck.Dir)
	}
	meta = append(meta, KV{"tokenizer.ggml.eos_token_id", Uint32(uint32(eos))})
	// The chat format's end of turn, which llama.cpp stops a chat turn at.
	if ck.Chat != nil {
		if id, ok := ck.Tokenizer.ID(ck.Chat.EndOfTurn); ok && id != eos {
			meta = append(meta, KV{"tokenizer.ggml.eot_token_id", Uint32(uint32(id))})
		}
	}
	if id, ok := special("pad_token"); ok {
		meta = append(meta, KV{"tokenizer.ggml.padding_token_id", Uint32(uint32(id))})
	}
	addBOS := false
	if v, ok := cfg["add_bos_token"]; ok {
		_ = json.Unmarshal(v, &addBOS)
	}
	meta = append(meta, KV{"tokenizer.ggml.add_bos_token", Bool(addBOS)})
	return meta, nil
}

// mergeStrings reads model.merges in either layout (["a b"] or
// [["a", "b"]]) as llama.cpp's "a b" strings.
func mergeStrings(raw json.RawMessage) ([]string, error) {
	var flat []string
	if json.Unmarshal(raw, &flat) == nil {
		return flat, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, err
	}
	out := make([]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 || strings.Contains(p[0], " ") || strings.Contains(p[1], " ") {
			return nil, fmt.Errorf("entry %d is %q: a pair of symbols without spaces", i, p)
		}
		out[i] = p[0] + " " + p[1]
	}
	return out, nil
}

// preNames are the tokenizer.ggml.pre values the exporter writes, in the
// order tried (llama.cpp's converter writes llama-bpe for Llama 3).
var preNames = []string{"llama-bpe", "qwen2", "smollm", "gpt2"}

// preName is llama.cpp's name of a tokenizer.json pre_tokenizer: the one
// whose pre-tokenizer (internal/tokenizer.GGUFPreTokenizer's) splits text
// as it does, compared by the steps' types, regexes and flags.
func preName(raw json.RawMessage) (string, error) {
	want, err := splitKey(raw)
	if err != nil {
		return "", err
	}
	for _, n := range preNames {
		p, err := tokenizer.GGUFPreTokenizer(n)
		if err != nil {
			return "", err
		}
		if k, err := splitKey(p.PreTokenizer); err == nil && k == want {
			return n, nil
		}
	}
	return "", fmt.Errorf("pre_tokenizer is not one llama.cpp names (%s): llama.cpp would split text differently", strings.Join(preNames, ", "))
}

// splitKey is what decides a pre_tokenizer's splitting: each step's type,
// regex, individual_digits, use_regex (true when absent) and
// add_prefix_space; trim_offsets, which only moves offsets, is left out.
func splitKey(raw json.RawMessage) (string, error) {
	type step struct {
		Type    string `json:"type"`
		Pattern *struct {
			Regex  string `json:"Regex"`
			String string `json:"String"`
		} `json:"pattern"`
		Behavior         string `json:"behavior"`
		Invert           bool   `json:"invert"`
		IndividualDigits bool   `json:"individual_digits"`
		UseRegex         *bool  `json:"use_regex"`
		AddPrefixSpace   bool   `json:"add_prefix_space"`
	}
	var top struct {
		step
		PreTokenizers []step `json:"pretokenizers"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return "", fmt.Errorf("pre_tokenizer: %w", err)
	}
	steps := []step{top.step}
	if top.Type == "Sequence" {
		steps = top.PreTokenizers
	}
	var b strings.Builder
	for _, s := range steps {
		re, str := "", ""
		if s.Pattern != nil {
			re, str = s.Pattern.Regex, s.Pattern.String
		}
		fmt.Fprintf(&b, "%s|%q|%q|%s|%t|%t|%t|%t;", s.Type, re, str, s.Behavior, s.Invert, s.IndividualDigits, s.UseRegex == nil || *s.UseRegex, s.AddPrefixSpace)
	}
	return b.String(), nil
}
