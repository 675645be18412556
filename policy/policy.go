package policy

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/textutil"
	"github.com/mlerl/mlerl/policy/hf"
)

// Kinds of policy.
const (
	// KindMLERL is mlerl's own transformer, trained from scratch on a
	// vocabulary trimmed to its corpus.
	KindMLERL = "mlerl"
	// KindHF is a Hugging Face checkpoint folder (Llama, Qwen2, Qwen3).
	KindHF = "hf"
	// KindGGUF is a GGUF file (llama.cpp's format) of a Llama, Qwen2 or
	// Qwen3 model, run as the Hugging Face checkpoint it converts to
	// (policy/gguf): a policy opened from one is of kind KindHF, and its
	// Source says KindGGUF.
	KindGGUF = "gguf"
)

// Policy is one thing that says everything a stage needs of the model it
// trains or runs: its tokenizer, its vocabulary (what model ids mean), its
// chat format and its architecture (Model). SFT, PPO, the learning curve,
// evaluation, generation and the action grammar ask it (EncodePrompt,
// EncodeResponse, Decode, EOS, IsStop, TokenBytes, NewEngine) instead of
// assembling those parts themselves. There are two kinds:
//
//   - mlerl's own model (NewMLERL): the trimmed [Vocab] with its special
//     ids below every tokenizer id; a prompt is BOS and the compact
//     prompt, a response ends with EOS.
//   - a Hugging Face checkpoint (OpenHF, policy_hf.go): the folder's own
//     tokenizer and its whole vocabulary (model ids are tokenizer ids, the
//     embedding's padding rows masked), the compact prompt rendered as the
//     user turn of its chat format (ChatML or Llama 3) after a short
//     system message, ending with the assistant's generation prompt; a
//     response ends with the format's end-of-turn token and generation
//     stops at any of the checkpoint's stop ids.
//
// A Policy is safe for concurrent use; engines built from it are not.
type Policy struct {
	// Model is the shape, architecture, budgets and training of the model.
	Model Config
	// Source is what policy.json records of a Hugging Face policy (nil for
	// mlerl's own model).
	Source *Source

	tok   Tokenizer
	vocab *Vocab // mlerl's trimmed mapping; nil: model ids are tokenizer ids
	hf    *hf.Checkpoint
	// adapter is the PEFT adapter the policy starts from (nil: none, or
	// fresh adapters from the seed).
	adapter *hf.Adapter
	eos     int32
	stops   []int32 // sorted
	// free is the mask of free decoding: the ids with text and the stop
	// ids (nil: every id, mlerl's model).
	free Bitset
}

// NewMLERL is mlerl's own model of shape cfg over the trimmed vocabulary v
// of tokenizer tok.
func NewMLERL(cfg Config, v *Vocab, tok Tokenizer) *Policy {
	return &Policy{Model: cfg, tok: tok, vocab: v, eos: EosID, stops: []int32{EosID}}
}

// Kind is KindMLERL or KindHF (a GGUF file's policy too: Source.Kind
// tells them apart).
func (p *Policy) Kind() string {
	if p.Source != nil {
		return KindHF
	}
	return KindMLERL
}

// Vocab is mlerl's trimmed vocabulary (nil for a Hugging Face policy).
func (p *Policy) Vocab() *Vocab { return p.vocab }

// Tokenizer is the policy's tokenizer.
func (p *Policy) Tokenizer() Tokenizer { return p.tok }

// Size is the number of model ids (logits per position): the trimmed
// vocabulary, or the checkpoint's embedding rows.
func (p *Policy) Size() int { return p.Model.Vocab }

// EOS is the id a response ends with: EOS, or the chat format's end of
// turn (<|im_end|>, <|eot_id|>).
func (p *Policy) EOS() int32 { return p.eos }

// IsStop reports whether generation ends at id.
func (p *Policy) IsStop(id int32) bool {
	_, ok := slices.BinarySearch(p.stops, id)
	return ok
}

// StopIDs are the ids generation ends at, sorted.
func (p *Policy) StopIDs() []int32 { return slices.Clone(p.stops) }

// Encode turns text into model ids, with no special id: the trimmed
// vocabulary's ids (byte fallback for the rest), or the tokenizer's ids
// with control tokens written in the text kept as ordinary text.
func (p *Policy) Encode(text string) ([]int32, error) {
	if p.vocab != nil {
		return p.vocab.Encode(p.tok, text)
	}
	return toInt32(p.hf.Tokenizer.EncodeOrdinary(text)), nil
}

// Decode turns model ids into text, dropping the ids that stand for no
// text (specials, control tokens, padding rows).
func (p *Policy) Decode(ids []int32) string {
	if p.vocab != nil {
		return p.vocab.Decode(p.tok, ids)
	}
	keep := make([]int, 0, len(ids))
	for _, id := range ids {
		if p.TokenBytes(id) != nil {
			keep = append(keep, int(id))
		}
	}
	return p.hf.Tokenizer.Decode(keep)
}

// TokenBytes is the text of a model id as bytes (nil for an id that
// stands for no text: the action grammar never offers it).
func (p *Policy) TokenBytes(id int32) []byte {
	if p.vocab != nil {
		tid, ok := p.vocab.Token(id)
		if !ok {
			return nil
		}
		return p.tok.TokenBytes(tid)
	}
	t := p.hf.Tokenizer
	if id < 0 || int(id) >= t.VocabSize() || t.IsAdded(int(id)) {
		return nil
	}
	return t.TokenBytes(int(id))
}

// FreeMask is the set of ids free decoding may sample (nil: all of them):
// for a Hugging Face policy the ids with text and the stop ids, so that
// neither the embedding's padding rows, which no tokenizer id reaches, nor
// control tokens other than a stop are ever drawn.
func (p *Policy) FreeMask() Bitset { return p.free }

// EncodePrompt is the one prompt-fitting rule of the policy, shared by
// SFT, PPO (sampling and the loss) and evaluation, so that a state always
// reads as the same tokens. mlerl's model: BOS, then the compact prompt's
// ids, at most Model.PromptTokens after BOS. A Hugging Face policy: the
// chat-rendered prompt (system message, the compact prompt as the user
// turn, the assistant's generation prompt), at most Model.PromptTokens in
// all. Either way the compact prompt is cut by agents.RefitCompact (the
// oldest history lines first, then the script's last lines); a prompt
// that cannot be made to fit is an error naming it.
func (p *Policy) EncodePrompt(prompt string) ([]int32, error) {
	if p.vocab != nil {
		ids, err := fitPrompt(prompt, p.Model.PromptTokens, p.Encode)
		if err != nil {
			return nil, err
		}
		return append([]int32{BosID}, ids...), nil
	}
	return fitPrompt(prompt, p.Model.PromptTokens, p.chatPrompt)
}

// fitPrompt encodes prompt with encode, refitted by agents.RefitCompact
// until it takes at most budget tokens.
func fitPrompt(prompt string, budget int, encode func(string) ([]int32, error)) ([]int32, error) {
	var ids []int32
	var encErr error
	fits := func(s string) bool {
		ids, encErr = encode(s)
		return encErr == nil && len(ids) <= budget
	}
	text, ok := agents.RefitCompact(prompt, fits)
	if encErr != nil {
		return nil, encErr
	}
	if !ok {
		return nil, fmt.Errorf("policy: the prompt %q... does not fit in model.prompt_tokens %d even without its history and script (raise model.prompt_tokens and model.ctx)", textutil.Clip(prompt, 60), budget)
	}
	if text != prompt || len(ids) == 0 {
		// fits ran last on a longer candidate during the search: encode the
		// chosen text again.
		if ids, encErr = encode(text); encErr != nil {
			return nil, encErr
		}
	}
	return ids, nil
}

// EncodeResponse encodes a response and its EOS (the end of turn of a
// chat format), cut to Model.ResponseTokens (a cut response loses its end
// and its EOS).
func (p *Policy) EncodeResponse(response string) ([]int32, error) {
	ids, err := p.Encode(response)
	if err != nil {
		return nil, err
	}
	ids = append(ids, p.eos)
	if len(ids) > p.Model.ResponseTokens {
		ids = ids[:p.Model.ResponseTokens]
	}
	return ids, nil
}

// checkPrompt reports what is wrong with an encoded prompt, for
// Generate: empty, or (mlerl's model) without its BOS.
func (p *Policy) checkPrompt(ids []int32) error {
	switch {
	case len(ids) == 0:
		return fmt.Errorf("is empty (use the policy's EncodePrompt)")
	case p.Kind() == KindMLERL && ids[0] != BosID:
		return fmt.Errorf("does not start with BOS (use EncodePrompt)")
	}
	return nil
}

// ParseSpec reads a stage's `policy` key: "" or "mlerl" is mlerl's own
// model, "hf:DIR" the Hugging Face checkpoint folder DIR, "gguf:FILE" the
// GGUF model file FILE.
func ParseSpec(s string) (kind, dir string, err error) {
	switch {
	case s == "" || s == KindMLERL:
		return KindMLERL, "", nil
	case strings.HasPrefix(s, KindHF+":"):
		dir = strings.TrimPrefix(s, KindHF+":")
		if strings.TrimSpace(dir) == "" {
			return "", "", fmt.Errorf("names no folder: want hf:DIR, the Hugging Face checkpoint folder that holds config.json")
		}
		return KindHF, dir, nil
	case strings.HasPrefix(s, KindGGUF+":"):
		file := strings.TrimPrefix(s, KindGGUF+":")
		if strings.TrimSpace(file) == "" {
			return "", "", fmt.Errorf("names no file: want gguf:FILE, a GGUF model file (llama.cpp's format)")
		}
		return KindGGUF, file, nil
	}
	return "", "", fmt.Errorf("want %s (mlerl's own model), hf:DIR (a Hugging Face checkpoint folder) or gguf:FILE (a GGUF model file)", KindMLERL)
}

// Pretrained reports whether spec is a valid spec of a pretrained model
// (every kind ParseSpec reads but mlerl's own model, which only its
// checkpoints hold): what stages fine-tune from, and evaluate and
// experiment prompt as it is.
func Pretrained(spec string) bool {
	kind, _, err := ParseSpec(spec)
	return err == nil && kind != KindMLERL
}

// tablesKey identifies the grammar's token tables of the policy: one per
// vocabulary mapping (mlerl) or tokenizer (Hugging Face), shared by every
// constraint and generator built on it.
func (p *Policy) tablesKey() any {
	if p.vocab != nil {
		return p.vocab
	}
	return p.hf.Tokenizer
}

var tablesBuild sync.Mutex // one build of a policy's tables at a time
