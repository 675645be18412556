package policy

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/mlerl/mlerl/internal/textutil"
)

// Special model ids, below every trimmed tokenizer id.
const (
	PadID = 0 // padding; never a target
	UnkID = 1 // reserved (byte fallback means no text maps to it)
	BosID = 2 // start of the prompt
	EosID = 3 // end of the action: generation stops here
	// NumSpecial is the number of special ids.
	NumSpecial = 4
)

// Vocab maps the tokenizer ids the policy knows to a compact range
// [NumSpecial, Size) so that the embedding and LM head stay small (the
// Qwen vocabulary has 151k ids; a few thousand occur in the expert data).
// It always holds the tokenizer's single-byte tokens (all 256 for Qwen's):
// a token outside the vocabulary is spelled with the byte tokens of its
// bytes (byte fallback), so no text is ever dropped or turned into an
// unknown id, and the policy can write any word, including ones it never
// saw in training.
// It is stored with every checkpoint (vocab.json), since model ids mean
// nothing without it.
type Vocab struct {
	// Ids lists the kept tokenizer ids; model id NumSpecial+i is Ids[i].
	Ids   []int `json:"ids"`
	index map[int]int32
}

// BuildVocab keeps the byte tokens and every tokenizer id that occurs
// at least minCount times in corpus (minCount < 1 counts as 1) or at all in
// required (texts the policy must be able to write in one token per
// tokenizer token: the idea catalog, the task descriptions, the action
// grammar). Ids are kept in ascending order, so the mapping depends only
// on the sets of texts, not on their order.
func BuildVocab(tok Tokenizer, corpus []string, minCount int, required ...string) *Vocab {
	counts := map[int]int{}
	for _, t := range corpus {
		for _, id := range tok.Encode(t) {
			counts[id]++
		}
	}
	keep := map[int]bool{}
	for id, n := range counts {
		if n >= max(minCount, 1) {
			keep[id] = true
		}
	}
	for _, t := range required {
		for _, id := range tok.Encode(t) {
			keep[id] = true
		}
	}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	for _, id := range tok.ByteTokens(all) {
		keep[id] = true
	}
	ids := make([]int, 0, len(keep))
	for id := range keep {
		ids = append(ids, id)
	}
	return NewVocab(ids)
}

// NewVocab makes a mapping keeping ids (sorted and deduplicated).
func NewVocab(ids []int) *Vocab {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	v := &Vocab{Ids: ids}
	v.reindex()
	return v
}

func (v *Vocab) reindex() {
	v.index = make(map[int]int32, len(v.Ids))
	for i, id := range v.Ids {
		v.index[id] = int32(NumSpecial + i)
	}
}

// Size is the model's vocabulary size, specials included.
func (v *Vocab) Size() int { return NumSpecial + len(v.Ids) }

// Encode tokenizes text into model ids. A tokenizer token outside the
// vocabulary is spelled with its byte tokens; the error (which names the
// text) happens only with a vocabulary that lacks byte tokens (one built
// by an older mlerl).
func (v *Vocab) Encode(tok Tokenizer, text string) ([]int32, error) {
	ids := tok.Encode(text)
	out := make([]int32, 0, len(ids))
	for _, id := range ids {
		if m, ok := v.index[id]; ok {
			out = append(out, m)
			continue
		}
		for _, b := range tok.ByteTokens(tok.TokenBytes(id)) {
			m, ok := v.index[b]
			if !ok {
				return nil, fmt.Errorf("vocab: %q (in %q) is not in the vocabulary and the vocabulary has no byte tokens to spell it; retrain the policy with this mlerl", tok.Decode([]int{id}), textutil.Clip(text, 80))
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// ToTokenizer maps model ids back to tokenizer ids, dropping the special
// ids (padding, BOS, EOS), which stand for no text.
func (v *Vocab) ToTokenizer(ids []int32) []int {
	out := make([]int, 0, len(ids))
	for _, m := range ids {
		if i := int(m) - NumSpecial; i >= 0 && i < len(v.Ids) {
			out = append(out, v.Ids[i])
		}
	}
	return out
}

// Decode turns model ids into text.
func (v *Vocab) Decode(tok Tokenizer, ids []int32) string { return tok.Decode(v.ToTokenizer(ids)) }

// Token returns the tokenizer id of a model id (false for specials).
func (v *Vocab) Token(m int32) (int, bool) {
	if i := int(m) - NumSpecial; i >= 0 && i < len(v.Ids) {
		return v.Ids[i], true
	}
	return 0, false
}

// MarshalJSON writes {"ids": [...]}.
func (v *Vocab) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Ids []int `json:"ids"`
	}{v.Ids})
}

// UnmarshalJSON reads what MarshalJSON wrote and checks the ids are
// strictly increasing and non-negative.
func (v *Vocab) UnmarshalJSON(b []byte) error {
	var raw struct {
		Ids []int `json:"ids"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("vocab: %w", err)
	}
	for i, id := range raw.Ids {
		if id < 0 || (i > 0 && id <= raw.Ids[i-1]) {
			return fmt.Errorf("vocab: ids must be non-negative and strictly increasing; entry %d is %d", i, id)
		}
	}
	v.Ids = raw.Ids
	v.reindex()
	return nil
}
