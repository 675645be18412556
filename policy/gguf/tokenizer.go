package gguf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/mlerl/mlerl/internal/tokenizer"
)

// A GGUF file carries its tokenizer as metadata (tokenizer.ggml.*): the
// model kind, the token strings by id, their types, the BPE merges, the
// special ids and llama.cpp's name of the pre-tokenizer. mlerl runs
// byte-level BPE only (tokenizer.ggml.model "gpt2", what llama.cpp's
// converter writes for Llama 3, SmolLM2 and Qwen); the tokenizer.json
// below is the one the original model shipped with, as far as the
// metadata says: the pre-tokenizer and normalizer that
// tokenizer.ggml.pre names (the same splitting llama.cpp's llama-vocab.cpp
// applies for that name), control tokens as special added tokens,
// user-defined ones (Qwen3's <think>) as plain added tokens, llama.cpp's
// padding entries ([PAD151665], type unused) left out as the original's
// padding rows are.
//
// The parts the metadata only names (the normalizer, pre-tokenizer and
// ignore_merges of tokenizer.ggml.pre's family) come from
// internal/tokenizer.GGUFPreTokenizer, which docs/tokenizer.md describes
// with where transformers' GGUF loader differs (for SmolLM2, a run of
// spaces before a digit tokenizes differently there).

// vocabulary is a GGUF file's tokenizer, read and checked.
type vocabulary struct {
	tokens  []string
	types   []int64 // nil when the file has none (every token normal)
	merges  []string
	pre     tokenizer.GGUFPre
	preName string
	// Special ids; -1 when absent.
	bos, eos, pad int
	addBOS        bool
}

var padToken = regexp.MustCompile(`^\[PAD\d+\]$`)

// readVocabulary reads and checks tokenizer.ggml.* of f; rows is the
// embedding's row count, which no id may reach.
func readVocabulary(f *File, rows int) (*vocabulary, error) {
	meta := func(key, problem string) error {
		return fmt.Errorf("%s: metadata %q %s", f.Path, key, problem)
	}
	model, ok, err := f.String("tokenizer.ggml.model")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, meta("tokenizer.ggml.model", "is missing: the file carries no tokenizer (llama.cpp's converter writes it into tokenizer.ggml.*); use a GGUF file made with one")
	}
	if model != "gpt2" {
		return nil, meta("tokenizer.ggml.model", fmt.Sprintf("is %q: mlerl runs byte-level BPE tokenizers (\"gpt2\": Llama 3, SmolLM2, Qwen), not SentencePiece or others", model))
	}
	v := &vocabulary{bos: -1, eos: -1, pad: -1}
	tv, ok := f.Meta["tokenizer.ggml.tokens"]
	if !ok {
		return nil, meta("tokenizer.ggml.tokens", "is missing: the file carries no vocabulary")
	}
	if v.tokens, ok = tv.Strings(); !ok || len(v.tokens) == 0 {
		return nil, meta("tokenizer.ggml.tokens", fmt.Sprintf("is %s: want a non-empty array of strings", tv.Describe()))
	}
	if len(v.tokens) > rows {
		return nil, meta("tokenizer.ggml.tokens", fmt.Sprintf("has %d tokens but token_embd.weight has %d rows: the tokenizer does not belong to these weights", len(v.tokens), rows))
	}
	if tt, ok := f.Meta["tokenizer.ggml.token_type"]; ok {
		if v.types, ok = tt.Ints(); !ok || len(v.types) != len(v.tokens) {
			return nil, meta("tokenizer.ggml.token_type", fmt.Sprintf("is %s: want one integer per token (%d)", tt.Describe(), len(v.tokens)))
		}
	}
	mv, ok := f.Meta["tokenizer.ggml.merges"]
	if !ok {
		return nil, meta("tokenizer.ggml.merges", "is missing: a byte-level BPE tokenizer needs its merges")
	}
	if v.merges, ok = mv.Strings(); !ok {
		return nil, meta("tokenizer.ggml.merges", fmt.Sprintf("is %s: want an array of strings", mv.Describe()))
	}
	for i, m := range v.merges {
		if a, b, ok := strings.Cut(m, " "); !ok || a == "" || b == "" || strings.Contains(b, " ") {
			return nil, meta("tokenizer.ggml.merges", fmt.Sprintf("entry %d is %q: want two symbols separated by one space", i, m))
		}
	}
	var hasPre bool
	if v.preName, hasPre, err = f.String("tokenizer.ggml.pre"); err != nil {
		return nil, err
	}
	if !hasPre {
		return nil, meta("tokenizer.ggml.pre", "is missing: llama.cpp then splits text with its default regexes, which mlerl does not reproduce")
	}
	if v.pre, err = tokenizer.GGUFPreTokenizer(v.preName); err != nil {
		return nil, fmt.Errorf("%s: %v", f.Path, err)
	}
	for _, id := range []struct {
		key string
		dst *int
	}{{"tokenizer.ggml.bos_token_id", &v.bos}, {"tokenizer.ggml.eos_token_id", &v.eos}, {"tokenizer.ggml.padding_token_id", &v.pad}} {
		n, ok, err := f.Int(id.key)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if n < 0 || n >= int64(len(v.tokens)) {
			return nil, meta(id.key, fmt.Sprintf("is %d, outside the %d tokens", n, len(v.tokens)))
		}
		*id.dst = int(n)
	}
	if v.eos < 0 {
		return nil, meta("tokenizer.ggml.eos_token_id", "is missing: generation needs the end-of-text id")
	}
	if b, ok := f.Meta["tokenizer.ggml.add_bos_token"]; ok {
		v.addBOS, _ = b.Bool()
	}
	return v, nil
}

// tokenType is a token's type (normal when the file has none).
func (v *vocabulary) tokenType(id int) int64 {
	if v.types == nil {
		return tokenNormal
	}
	return v.types[id]
}

// skipped reports whether id stands for no token (llama.cpp's padding
// entries and unused ids): the original tokenizer has no entry there.
func (v *vocabulary) skipped(id int) bool {
	return v.tokenType(id) == tokenUnused || padToken.MatchString(v.tokens[id]) || v.tokens[id] == ""
}

// tokenizerJSON is the tokenizer.json of v in Hugging Face's layout.
func (v *vocabulary) tokenizerJSON() []byte {
	var b bytes.Buffer
	str := func(s string) {
		j, _ := json.Marshal(s)
		b.Write(j)
	}
	b.WriteString(`{"version":"1.0","truncation":null,"padding":null,"added_tokens":[`)
	first := true
	for id, s := range v.tokens {
		typ := v.tokenType(id)
		if v.skipped(id) || (typ != tokenControl && typ != tokenUserDefined) {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		fmt.Fprintf(&b, `{"id":%d,"content":`, id)
		str(s)
		fmt.Fprintf(&b, `,"single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":%t}`, typ == tokenControl)
	}
	b.WriteString(`],"normalizer":` + string(v.pre.Normalizer) + `,"pre_tokenizer":` + string(v.pre.PreTokenizer) + `,"post_processor":`)
	if v.addBOS && v.bos >= 0 {
		bos, _ := json.Marshal(v.tokens[v.bos])
		fmt.Fprintf(&b, `{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":%s,"type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"pair":[{"SpecialToken":{"id":%s,"type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":%s,"type_id":1}},{"Sequence":{"id":"B","type_id":1}}],"special_tokens":{%s:{"id":%s,"ids":[%d],"tokens":[%s]}}}`,
			bos, bos, bos, bos, bos, v.bos, bos)
	} else {
		b.WriteString(`null`)
	}
	b.WriteString(`,"decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},`)
	fmt.Fprintf(&b, `"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":%t,"vocab":{`, v.pre.IgnoreMerges)
	seen := map[string]bool{}
	first = true
	for id, s := range v.tokens {
		if v.skipped(id) {
			continue
		}
		typ := v.tokenType(id)
		if typ != tokenControl && typ != tokenUserDefined {
			s = byteLevelSpelling(s)
		}
		if seen[s] {
			continue // a repeated string: the first id keeps it
		}
		seen[s] = true
		if !first {
			b.WriteByte(',')
		}
		first = false
		str(s)
		fmt.Fprintf(&b, ":%d", id)
	}
	b.WriteString(`},"merges":[`)
	for i, m := range v.merges {
		if i > 0 {
			b.WriteByte(',')
		}
		l, r, _ := strings.Cut(m, " ")
		b.WriteByte('[')
		str(l)
		b.WriteByte(',')
		str(r)
		b.WriteByte(']')
	}
	b.WriteString("]}}\n")
	return b.Bytes()
}

// byteLevelSpelling is a token in GPT-2's byte-level alphabet: as it is
// when every character is in it, else its UTF-8 bytes spelt there (what
// transformers does for a token a converter wrote as raw text).
func byteLevelSpelling(s string) string {
	ok := true
	for _, r := range s {
		if _, in := byteOfRune[r]; !in {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	var b strings.Builder
	for _, c := range []byte(s) {
		b.WriteRune(runeOfByte[c])
	}
	return b.String()
}

// runeOfByte is GPT-2's byte-to-symbol table (bytes_to_unicode): the
// printable Latin-1 bytes stand for themselves, the others are shifted to
// U+0100 and up in byte order.
var runeOfByte, byteOfRune = func() ([256]rune, map[rune]byte) {
	var tab [256]rune
	inv := map[rune]byte{}
	n := 0
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff) {
			tab[b] = rune(b)
		} else {
			tab[b] = rune(256 + n)
			n++
		}
		inv[tab[b]] = byte(b)
	}
	return tab, inv
}()

// tokenizerConfigJSON is tokenizer_config.json: the special tokens by
// text, add_bos_token and the chat template.
func (v *vocabulary) tokenizerConfigJSON(chatTemplate string, maxLen int) []byte {
	tok := func(id int) any {
		if id < 0 {
			return nil
		}
		return v.tokens[id]
	}
	m := map[string]any{
		"add_bos_token": v.addBOS, "add_eos_token": false, "bos_token": tok(v.bos), "eos_token": tok(v.eos),
		"pad_token": tok(v.pad), "unk_token": nil, "chat_template": chatTemplate, "clean_up_tokenization_spaces": false,
		"model_max_length": maxLen, "tokenizer_class": "PreTrainedTokenizerFast",
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	return append(b, '\n')
}
