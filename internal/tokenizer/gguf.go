package tokenizer

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// A GGUF file carries its tokenizer as tokenizer.ggml.* metadata, not as
// tokenizer.json: the tokens (byte-level spellings for a "gpt2" model),
// merges as "a b" strings, token types (3: control, 4: user-defined) and a
// pre-tokenizer name, tokenizer.ggml.pre, whose splitting llama.cpp
// hard-codes. A reader builds a tokenizer.json from them and hands it to
// [Read]; GGUFPreTokenizer supplies the part the metadata only names.

// GGUFPre is what tokenizer.json says, for one tokenizer.ggml.pre value,
// in the fields the metadata does not carry.
type GGUFPre struct {
	// Normalizer and PreTokenizer are tokenizer.json's "normalizer" and
	// "pre_tokenizer" values (Normalizer is JSON null when there is none).
	Normalizer, PreTokenizer json.RawMessage
	// IgnoreMerges is model.ignore_merges.
	IgnoreMerges bool
}

// The split regexes of the families' own tokenizer.json files.
const (
	qwen2Split  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	llama3Split = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

func splitThenByteLevel(re string, trimOffsets bool) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": re}, "behavior": "Isolated", "invert": false},
		map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": trimOffsets, "use_regex": false},
	}})
	return b
}

var ggufPres = map[string]GGUFPre{
	// Qwen2, Qwen2.5 and Qwen3 (llama.cpp writes "qwen2" for all three).
	"qwen2": {Normalizer: json.RawMessage(`{"type":"NFC"}`), PreTokenizer: splitThenByteLevel(qwen2Split, false)},
	// Llama 3, 3.1, 3.2 ("llama-bpe"; "llama3" in some converters).
	"llama-bpe": {Normalizer: json.RawMessage(`null`), PreTokenizer: splitThenByteLevel(llama3Split, true), IgnoreMerges: true},
	"llama3":    {Normalizer: json.RawMessage(`null`), PreTokenizer: splitThenByteLevel(llama3Split, true), IgnoreMerges: true},
	// SmolLM (1, 2): digits one by one, then GPT-2's regex.
	"smollm": {Normalizer: json.RawMessage(`null`), PreTokenizer: json.RawMessage(
		`{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},` +
			`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}]}`)},
	// GPT-2's own regex inside ByteLevel.
	"gpt2": {Normalizer: json.RawMessage(`null`), PreTokenizer: json.RawMessage(
		`{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true}`)},
}

// GGUFPreTokenizer returns the normalizer, pre-tokenizer and
// ignore_merges of the family named by a GGUF file's tokenizer.ggml.pre,
// as that family's own tokenizer.json has them (the files these
// references test): "qwen2" (NFC, Qwen's split), "llama-bpe" or "llama3"
// (Llama 3's split, ignore_merges), "smollm" (Digits, then GPT-2's regex)
// and "gpt2". Another name is an error listing these.
//
// transformers 5.25 reads the same metadata differently: for "smollm" it
// writes a lone ByteLevel (no Digits step), for "qwen2" no NFC normalizer,
// for "llama-bpe" no ignore_merges. Text where that matters (a whitespace
// run before a digit for SmolLM2; docs/tokenizer.md) tokenizes differently
// from transformers loading the same GGUF.
func GGUFPreTokenizer(pre string) (GGUFPre, error) {
	p, ok := ggufPres[pre]
	if !ok {
		names := make([]string, 0, len(ggufPres))
		for n := range ggufPres {
			names = append(names, n)
		}
		sort.Strings(names)
		return GGUFPre{}, fmt.Errorf("tokenizer.ggml.pre %q is not a pre-tokenizer mlerl knows (known: %s)", pre, strings.Join(names, ", "))
	}
	return p, nil
}
