package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/mlerl/mlerl/internal/tokenizer"
)

// Checkpoint is a Hugging Face decoder folder, opened and checked: its
// architecture, its weights (read lazily), its own tokenizer, chat format
// and generation settings. It is the one thing that says how to run, prompt
// and stop the model. Close it when done.
type Checkpoint struct {
	// Dir is the folder; for a checkpoint made in memory ([Assemble]),
	// the file it was made from.
	Dir string
	// Files, when not nil, holds the small files (config.json,
	// tokenizer.json, tokenizer_config.json...) of a checkpoint made in
	// memory, read instead of Dir's and written out with a merged model.
	Files     map[string][]byte
	Arch      *Arch
	Weights   Tensors
	Tokenizer *tokenizer.Tokenizer
	Chat      *ChatFormat
	// BOSTokenID is generation_config.json's (else config.json's), nil when
	// neither has one.
	BOSTokenID *int
	// EOSTokenIDs are generation_config.json's eos_token_id (else
	// config.json's); [Checkpoint.StopIDs] adds the chat format's end of
	// turn and tokenizer_config.json's eos_token.
	EOSTokenIDs []int
	eosToken    string
}

// Load opens a checkpoint folder: config.json (checked by [ParseConfig]),
// model.safetensors or a sharded set (checked against the config),
// tokenizer.json (byte-level BPE, read by [tokenizer.Load]),
// tokenizer_config.json or chat_template.jinja (the chat format, see
// [DetectChat]) and generation_config.json when there. Every refusal is one
// line naming the file and field and how to fix it; Load writes nothing.
func Load(dir string) (*Checkpoint, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint folder: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("checkpoint %s is a file: give the folder that holds config.json", dir)
	}
	cfgPath := filepath.Join(dir, "config.json")
	a, err := ReadConfig(cfgPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s is missing: not a Hugging Face checkpoint folder (transformers' save_pretrained writes it)", cfgPath)
	}
	if err != nil {
		return nil, err
	}
	w, err := OpenWeights(dir)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Dir: dir, Arch: a, Weights: w, BOSTokenID: a.BOSTokenID, EOSTokenIDs: a.EOSTokenIDs}
	if err := c.load(); err != nil {
		w.Close()
		return nil, err
	}
	return c, nil
}

// Assemble makes a checkpoint of small files held in memory (config.json,
// tokenizer.json, tokenizer_config.json and, when there,
// generation_config.json, by file name) and weights read from elsewhere:
// how policy/gguf presents a GGUF file as the Hugging Face checkpoint it
// converts to. name, the file they were made from, is the checkpoint's
// Dir and names it in errors. The checks are Load's; w is not closed on a
// refusal.
func Assemble(name string, files map[string][]byte, w Tensors) (*Checkpoint, error) {
	c := &Checkpoint{Dir: name, Files: files, Weights: w}
	raw, err := c.file("config.json")
	if err != nil {
		return nil, err
	}
	if c.Arch, err = ParseConfig(c.where("config.json"), raw); err != nil {
		return nil, err
	}
	c.BOSTokenID, c.EOSTokenIDs = c.Arch.BOSTokenID, c.Arch.EOSTokenIDs
	if err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

// ReadFile reads one of the checkpoint's small files (tokenizer.json...):
// from Files for a checkpoint made in memory, else from the folder.
func (c *Checkpoint) ReadFile(name string) ([]byte, error) { return c.file(name) }

func (c *Checkpoint) file(name string) ([]byte, error) {
	if c.Files != nil {
		b, ok := c.Files[name]
		if !ok {
			return nil, &fs.PathError{Op: "open", Path: c.where(name), Err: fs.ErrNotExist}
		}
		return b, nil
	}
	return os.ReadFile(filepath.Join(c.Dir, name))
}

// where names one of the checkpoint's files in errors.
func (c *Checkpoint) where(name string) string {
	if c.Files != nil {
		return fmt.Sprintf("%s (as %s)", c.Dir, name)
	}
	return filepath.Join(c.Dir, name)
}

func (c *Checkpoint) load() error {
	if err := c.Arch.CheckTensors(c.Weights); err != nil {
		return fmt.Errorf("%s: %w", c.Dir, err)
	}
	tokPath := c.where("tokenizer.json")
	raw, err := c.file("tokenizer.json")
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s is missing: copy the model's tokenizer.json (and tokenizer_config.json) into the checkpoint folder", tokPath)
	}
	if err != nil {
		return err
	}
	tok, err := tokenizer.Read(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("tokenizer %s: %w", tokPath, err)
	}
	if tok.VocabSize() > c.Arch.VocabSize {
		return fmt.Errorf("%s has %d ids but config.json's vocab_size is %d: the tokenizer does not belong to this model", tokPath, tok.VocabSize(), c.Arch.VocabSize)
	}
	c.Tokenizer = tok
	if c.Chat, err = c.detectChat(); err != nil {
		return err
	}
	tc, err := c.tokenizerConfig()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	c.eosToken = tc.EOSToken
	// The control tokens the format writes must be the tokenizer's.
	for _, s := range c.controlTokens() {
		if id, ok := tok.ID(s); !ok || !tok.IsAdded(id) {
			return fmt.Errorf("%s: the chat format writes %q, which is not an added token of %s: the template and tokenizer do not match", c.Chat.Source, s, tokPath)
		}
	}
	if err := c.readGeneration(); err != nil {
		return err
	}
	for _, id := range c.StopIDs() {
		if id < 0 || id >= c.Arch.VocabSize {
			return fmt.Errorf("%s: eos id %d is outside vocab_size %d", c.Dir, id, c.Arch.VocabSize)
		}
	}
	return nil
}

func (c *Checkpoint) controlTokens() []string {
	switch c.Chat.Kind {
	case Llama3:
		out := []string{"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}
		if c.Chat.BOS != "" {
			out = append(out, c.Chat.BOS)
		}
		return out
	case ChatMLQwen3:
		return []string{"<|im_start|>", "<|im_end|>", "<think>", "</think>"}
	}
	return []string{"<|im_start|>", "<|im_end|>"}
}

// readGeneration takes bos/eos from generation_config.json when present:
// it is what transformers' generate stops on.
func (c *Checkpoint) readGeneration() error {
	p := c.where("generation_config.json")
	b, err := c.file("generation_config.json")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	rc := &rawConfig{path: p}
	if err := json.Unmarshal(b, &rc.fields); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if rc.has("eos_token_id") {
		if c.EOSTokenIDs, err = rc.intOrList("eos_token_id"); err != nil {
			return err
		}
	}
	if rc.has("bos_token_id") {
		v, err := rc.int("bos_token_id", 0)
		if err != nil {
			return err
		}
		c.BOSTokenID = &v
	}
	return nil
}

// StopIDs are the ids that end a generated turn, sorted: the EOS ids, the
// chat format's end-of-turn token and tokenizer_config.json's eos_token.
func (c *Checkpoint) StopIDs() []int {
	out := slices.Clone(c.EOSTokenIDs)
	for _, s := range []string{c.Chat.EndOfTurn, c.eosToken} {
		if id, ok := c.Tokenizer.ID(s); ok && s != "" {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// EncodeChat renders msgs in the checkpoint's chat format and encodes
// them: the control tokens the template writes become their ids, every
// other stretch (template text and contents together) is encoded as
// ordinary text. The ids equal the tokenizer's on the rendered string —
// what apply_chat_template(tokenize=True) gives — except where a content
// spells a control token, which stays ordinary text here.
func (c *Checkpoint) EncodeChat(msgs []Message, gen bool) ([]int, error) {
	parts, err := c.Chat.Parts(msgs, gen)
	if err != nil {
		return nil, err
	}
	var ids []int
	for _, p := range parts {
		if p.Special {
			id, ok := c.Tokenizer.ID(p.Text)
			if !ok {
				return nil, fmt.Errorf("chat control token %q is not in the tokenizer", p.Text)
			}
			ids = append(ids, id)
			continue
		}
		ids = append(ids, c.Tokenizer.EncodeOrdinary(p.Text)...)
	}
	return ids, nil
}

// Close closes the weight files.
func (c *Checkpoint) Close() error { return c.Weights.Close() }
