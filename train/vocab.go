package train

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Tokenizer is what the trainer needs from a tokenizer (the Qwen BPE of
// internal/tokenizer, or [ByteTokenizer] in tests).
type Tokenizer interface {
	Encode(text string) []int
	Decode(ids []int) string
}

// Special model ids, below every trimmed tokenizer id.
const (
	PadID = 0 // padding; never a target
	UnkID = 1 // a tokenizer id not seen in the training corpus
	BosID = 2 // start of the prompt
	EosID = 3 // end of the action: generation stops here
	// NumSpecial is the number of special ids.
	NumSpecial = 4
)

// Vocab maps the tokenizer's ids that occur in the training corpus to a
// compact range [NumSpecial, Size) so that the embedding and LM head stay
// small (the Qwen vocabulary has 151k ids; a few thousand occur in the
// expert data). Ids never seen map to UnkID. It is stored with every
// checkpoint (vocab.json), since model ids mean nothing without it.
type Vocab struct {
	// Ids lists the kept tokenizer ids; model id NumSpecial+i is Ids[i].
	Ids   []int `json:"ids"`
	index map[int]int32
}

// BuildVocab keeps every tokenizer id that occurs at least minCount times
// in texts (minCount < 1 counts as 1), in ascending id order so that the
// mapping depends only on the set of texts, not on their order.
func BuildVocab(tok Tokenizer, texts []string, minCount int) *Vocab {
	counts := map[int]int{}
	for _, t := range texts {
		for _, id := range tok.Encode(t) {
			counts[id]++
		}
	}
	ids := make([]int, 0, len(counts))
	for id, n := range counts {
		if n >= max(minCount, 1) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
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

// ToModel maps tokenizer ids to model ids (unseen ids to UnkID).
func (v *Vocab) ToModel(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		m, ok := v.index[id]
		if !ok {
			m = UnkID
		}
		out[i] = m
	}
	return out
}

// ToTokenizer maps model ids back to tokenizer ids, dropping special ids
// (so Decode never sees an id the tokenizer does not know).
func (v *Vocab) ToTokenizer(ids []int32) []int {
	out := make([]int, 0, len(ids))
	for _, m := range ids {
		if i := int(m) - NumSpecial; i >= 0 && i < len(v.Ids) {
			out = append(out, v.Ids[i])
		}
	}
	return out
}

// Encode tokenizes text into model ids.
func (v *Vocab) Encode(tok Tokenizer, text string) []int32 { return v.ToModel(tok.Encode(text)) }

// Decode turns model ids into text.
func (v *Vocab) Decode(tok Tokenizer, ids []int32) string { return tok.Decode(v.ToTokenizer(ids)) }

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

// ByteTokenizer is a tokenizer whose ids are the UTF-8 bytes of the text:
// for tests and for running without the Qwen tokenizer files.
type ByteTokenizer struct{}

// Encode returns the bytes of text as ids.
func (ByteTokenizer) Encode(text string) []int {
	out := make([]int, len(text))
	for i := range len(text) {
		out[i] = int(text[i])
	}
	return out
}

// Decode joins bytes back into a string; ids outside [0,256) are dropped.
func (ByteTokenizer) Decode(ids []int) string {
	b := make([]byte, 0, len(ids))
	for _, id := range ids {
		if id >= 0 && id < 256 {
			b = append(b, byte(id))
		}
	}
	return string(b)
}
