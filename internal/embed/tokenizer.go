package embed

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer is the subset of a Hugging Face tokenizer.json that
// sentence-embedding models of the BERT family use. Supported:
//
//   - model: "WordPiece" (greedy longest-match-first with the continuing
//     prefix, "##" by default) or "WordLevel" (whole words);
//   - normalizer: null, "BertNormalizer" (clean_text, lowercase, accent
//     stripping, spaces around CJK characters), "Lowercase", "NFD", "NFC",
//     "StripAccents", or a "Sequence" of these;
//   - pre_tokenizer: null or "WhitespaceSplit" (split on white space),
//     "BertPreTokenizer" (also split off every punctuation character),
//     "Whitespace" (runs of word characters and runs of other non-space
//     characters), or a "Sequence" of these;
//   - post_processor: null, "BertProcessing" ([CLS] A [SEP]) or
//     "TemplateProcessing" (its "single" template).
//
// Anything else (BPE or Unigram models, byte-level or regex
// pre-tokenizers) is refused by [LoadTokenizer] with an error naming it.
type Tokenizer struct {
	model       string
	vocab       map[string]int64
	unk         int64
	hasUnk      bool
	prefix      string
	maxWordRune int
	normalizers []string
	lowercase   bool
	stripAcc    bool
	pretoks     []string
	prefixIDs   []int64 // special tokens before the sequence
	suffixIDs   []int64 // and after it
	padID       int64
}

type tokJSON struct {
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Padding       *struct {
		PadID int64 `json:"pad_id"`
	} `json:"padding"`
	Model struct {
		Type                    string           `json:"type"`
		Vocab                   json.RawMessage  `json:"vocab"`
		UnkToken                string           `json:"unk_token"`
		ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
		MaxInputCharsPerWord    int              `json:"max_input_chars_per_word"`
		Merges                  *json.RawMessage `json:"merges"`
	} `json:"model"`
}

type component struct {
	Type          string            `json:"type"`
	Lowercase     *bool             `json:"lowercase"`
	StripAccents  *bool             `json:"strip_accents"`
	Normalizers   []json.RawMessage `json:"normalizers"`
	PreTokenizers []json.RawMessage `json:"pretokenizers"`
	Sep           []any             `json:"sep"`
	Cls           []any             `json:"cls"`
	Single        []map[string]struct {
		ID string `json:"id"`
	} `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int64 `json:"ids"`
	} `json:"special_tokens"`
}

// LoadTokenizer reads a tokenizer.json file.
func LoadTokenizer(path string) (*Tokenizer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := ParseTokenizer(b)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	return t, nil
}

// ParseTokenizer reads the JSON of a tokenizer.json file.
func ParseTokenizer(data []byte) (*Tokenizer, error) {
	var tj tokJSON
	if err := json.Unmarshal(data, &tj); err != nil {
		return nil, fmt.Errorf("not a tokenizer.json: %w", err)
	}
	t := &Tokenizer{model: tj.Model.Type, prefix: "##", maxWordRune: 100}
	switch tj.Model.Type {
	case "WordPiece", "WordLevel":
	case "":
		return nil, fmt.Errorf("model.type is missing")
	default:
		return nil, fmt.Errorf("model type %q is not supported (WordPiece or WordLevel only)", tj.Model.Type)
	}
	if err := json.Unmarshal(tj.Model.Vocab, &t.vocab); err != nil || len(t.vocab) == 0 {
		return nil, fmt.Errorf("model.vocab: want a non-empty {token: id} object")
	}
	if tj.Model.ContinuingSubwordPrefix != nil {
		t.prefix = *tj.Model.ContinuingSubwordPrefix
	}
	if tj.Model.MaxInputCharsPerWord > 0 {
		t.maxWordRune = tj.Model.MaxInputCharsPerWord
	}
	if tj.Model.UnkToken != "" {
		id, ok := t.vocab[tj.Model.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model.unk_token %q is not in the vocabulary", tj.Model.UnkToken)
		}
		t.unk, t.hasUnk = id, true
	}
	if tj.Padding != nil {
		t.padID = tj.Padding.PadID
	}
	if err := t.parseNormalizer(tj.Normalizer); err != nil {
		return nil, err
	}
	if err := t.parsePreTokenizer(tj.PreTokenizer); err != nil {
		return nil, err
	}
	if err := t.parsePostProcessor(tj.PostProcessor); err != nil {
		return nil, err
	}
	return t, nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

func (t *Tokenizer) parseNormalizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("normalizer: %w", err)
	}
	switch c.Type {
	case "Sequence":
		for _, n := range c.Normalizers {
			if err := t.parseNormalizer(n); err != nil {
				return err
			}
		}
	case "BertNormalizer":
		t.normalizers = append(t.normalizers, "bert")
		t.lowercase = c.Lowercase == nil || *c.Lowercase
		// As in BERT: strip_accents null follows lowercase.
		t.stripAcc = t.lowercase
		if c.StripAccents != nil {
			t.stripAcc = *c.StripAccents
		}
	case "Lowercase", "NFD", "NFC", "NFKC", "NFKD", "StripAccents":
		t.normalizers = append(t.normalizers, c.Type)
	default:
		return fmt.Errorf("normalizer %q is not supported (BertNormalizer, Lowercase, NFD, NFC, NFKC, NFKD, StripAccents or a Sequence of them)", c.Type)
	}
	return nil
}

func (t *Tokenizer) parsePreTokenizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch c.Type {
	case "Sequence":
		for _, p := range c.PreTokenizers {
			if err := t.parsePreTokenizer(p); err != nil {
				return err
			}
		}
	case "BertPreTokenizer", "Whitespace", "WhitespaceSplit":
		t.pretoks = append(t.pretoks, c.Type)
	default:
		return fmt.Errorf("pre_tokenizer %q is not supported (BertPreTokenizer, Whitespace, WhitespaceSplit or a Sequence of them)", c.Type)
	}
	return nil
}

func (t *Tokenizer) parsePostProcessor(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("post_processor: %w", err)
	}
	specialID := func(pair []any, what string) (int64, error) {
		if len(pair) != 2 {
			return 0, fmt.Errorf("post_processor BertProcessing: %s must be [token, id]", what)
		}
		id, ok := pair[1].(float64)
		if !ok {
			return 0, fmt.Errorf("post_processor BertProcessing: %s id is not a number", what)
		}
		return int64(id), nil
	}
	switch c.Type {
	case "BertProcessing":
		cls, err := specialID(c.Cls, "cls")
		if err != nil {
			return err
		}
		sep, err := specialID(c.Sep, "sep")
		if err != nil {
			return err
		}
		t.prefixIDs, t.suffixIDs = []int64{cls}, []int64{sep}
	case "TemplateProcessing":
		seenSeq := false
		for _, piece := range c.Single {
			if _, ok := piece["Sequence"]; ok {
				seenSeq = true
				continue
			}
			sp, ok := piece["SpecialToken"]
			if !ok {
				return fmt.Errorf("post_processor TemplateProcessing: a piece is neither Sequence nor SpecialToken")
			}
			st, ok := c.SpecialTokens[sp.ID]
			if !ok || len(st.IDs) == 0 {
				return fmt.Errorf("post_processor TemplateProcessing: special token %q has no ids in special_tokens", sp.ID)
			}
			if seenSeq {
				t.suffixIDs = append(t.suffixIDs, st.IDs...)
			} else {
				t.prefixIDs = append(t.prefixIDs, st.IDs...)
			}
		}
	default:
		return fmt.Errorf("post_processor %q is not supported (BertProcessing or TemplateProcessing)", c.Type)
	}
	return nil
}

// Encode returns the token ids of text with the post-processor's special
// tokens, the sequence truncated so that the total is at most maxTokens
// (maxTokens <= 0: no limit). Words the vocabulary cannot spell become the
// unknown token, or are dropped when the tokenizer has none.
func (t *Tokenizer) Encode(text string, maxTokens int) []int64 {
	ids := append([]int64{}, t.prefixIDs...)
	room := -1
	if maxTokens > 0 {
		room = max(0, maxTokens-len(t.prefixIDs)-len(t.suffixIDs))
	}
	for _, w := range t.preTokenize(t.normalize(text)) {
		for _, id := range t.word(w) {
			if room == 0 {
				return append(ids, t.suffixIDs...)
			}
			ids = append(ids, id)
			room--
		}
	}
	return append(ids, t.suffixIDs...)
}

// PadID is the id used for padding positions (padding.pad_id, else 0).
func (t *Tokenizer) PadID() int64 { return t.padID }

func (t *Tokenizer) normalize(s string) string {
	for _, n := range t.normalizers {
		switch n {
		case "bert":
			var b strings.Builder
			for _, r := range s {
				switch {
				case r == 0 || r == 0xfffd || (unicode.IsControl(r) && r != '\t' && r != '\n' && r != '\r'):
					continue
				case unicode.IsSpace(r):
					b.WriteByte(' ')
				case unicode.Is(unicode.Han, r):
					b.WriteByte(' ')
					b.WriteRune(r)
					b.WriteByte(' ')
				default:
					b.WriteRune(r)
				}
			}
			s = b.String()
			if t.stripAcc {
				s = stripAccents(s)
			}
			if t.lowercase {
				s = strings.ToLower(s)
			}
		case "Lowercase":
			s = strings.ToLower(s)
		case "NFD":
			s = norm.NFD.String(s)
		case "NFC":
			s = norm.NFC.String(s)
		case "NFKD":
			s = norm.NFKD.String(s)
		case "NFKC":
			s = norm.NFKC.String(s)
		case "StripAccents":
			s = stripAccents(s)
		}
	}
	return s
}

func stripAccents(s string) string {
	var b strings.Builder
	for _, r := range norm.NFD.String(s) {
		if !unicode.Is(unicode.Mn, r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func (t *Tokenizer) preTokenize(s string) []string {
	words := []string{s}
	if len(t.pretoks) == 0 {
		return strings.Fields(s) // a model needs some word boundary; white space is the natural one
	}
	for _, p := range t.pretoks {
		var next []string
		for _, w := range words {
			switch p {
			case "WhitespaceSplit":
				next = append(next, strings.Fields(w)...)
			case "BertPreTokenizer":
				next = append(next, splitRuns(w, func(r rune) int {
					if unicode.IsSpace(r) {
						return 0
					}
					if isBertPunct(r) {
						return -1 // a token on its own
					}
					return 1
				})...)
			case "Whitespace":
				next = append(next, splitRuns(w, func(r rune) int {
					switch {
					case unicode.IsSpace(r):
						return 0
					case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || unicode.Is(unicode.Mn, r):
						return 1
					default:
						return 2
					}
				})...)
			}
		}
		words = next
	}
	return words
}

// splitRuns splits s into runs of runes of the same class; class 0 is a
// separator (dropped) and class -1 makes every rune its own piece.
func splitRuns(s string, class func(rune) int) []string {
	var out []string
	start, cur := -1, 0
	for i, r := range s {
		c := class(r)
		if start >= 0 && (c != cur || c == -1) {
			out = append(out, s[start:i])
			start = -1
		}
		if c != 0 && start < 0 {
			start, cur = i, c
		}
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}

func isBertPunct(r rune) bool {
	if (r >= 33 && r <= 47) || (r >= 58 && r <= 64) || (r >= 91 && r <= 96) || (r >= 123 && r <= 126) {
		return true
	}
	return unicode.IsPunct(r)
}

// word maps one pre-tokenized word to ids.
func (t *Tokenizer) word(w string) []int64 {
	if t.model == "WordLevel" {
		if id, ok := t.vocab[w]; ok {
			return []int64{id}
		}
		return t.unknown()
	}
	r := []rune(w)
	if len(r) > t.maxWordRune {
		return t.unknown()
	}
	var ids []int64
	for start := 0; start < len(r); {
		end, found := len(r), int64(-1)
		for ; end > start; end-- {
			piece := string(r[start:end])
			if start > 0 {
				piece = t.prefix + piece
			}
			if id, ok := t.vocab[piece]; ok {
				found = id
				break
			}
		}
		if found < 0 {
			return t.unknown() // as in BERT: one unknown piece makes the whole word unknown
		}
		ids = append(ids, found)
		start = end
	}
	return ids
}

func (t *Tokenizer) unknown() []int64 {
	if t.hasUnk {
		return []int64{t.unk}
	}
	return nil
}
