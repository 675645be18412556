package policy

import (
	"fmt"

	"github.com/mlerl/mlerl/internal/tokenizer"
)

// Tokenizer is what the policy needs from a tokenizer: the Qwen3 BPE of
// internal/tokenizer, or [ByteTokenizer] (tests, and running without the
// Qwen files). Both are byte-level, so any text can be spelled with
// single-byte tokens (the vocabulary's byte fallback), less the bytes a
// vocabulary has no token for (none in Qwen's; 21 in SmolLM2's), which
// Encode leaves out as Hugging Face's tokenizers does.
type Tokenizer interface {
	Encode(text string) []int
	Decode(ids []int) string
	// TokenBytes returns the bytes an id stands for (nil: unknown id).
	TokenBytes(id int) []byte
	// ByteTokens returns, for each byte that has one, the id of its
	// one-byte token (bytes without one are left out).
	ByteTokens(b []byte) []int
}

// Tokenizer names for the stage configs' `tokenizer` key.
const (
	TokenizerQwen  = "qwen"
	TokenizerBytes = "bytes"
)

// OpenTokenizer returns the tokenizer named name: "qwen" (the Qwen3 BPE
// that `make setup` installs) or "bytes".
func OpenTokenizer(name string) (Tokenizer, error) {
	switch name {
	case TokenizerQwen:
		t, err := tokenizer.Default()
		if err != nil {
			return nil, fmt.Errorf("tokenizer %s: %w", name, err)
		}
		return t, nil
	case TokenizerBytes:
		return ByteTokenizer{}, nil
	}
	return nil, fmt.Errorf("tokenizer %q is not known (known: %s, %s)", name, TokenizerBytes, TokenizerQwen)
}

// ByteTokenizer is a tokenizer whose ids are the UTF-8 bytes of the text.
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

// TokenBytes returns the byte of id.
func (ByteTokenizer) TokenBytes(id int) []byte {
	if id < 0 || id >= 256 {
		return nil
	}
	return []byte{byte(id)}
}

// ByteTokens returns the bytes as ids.
func (ByteTokenizer) ByteTokens(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}
