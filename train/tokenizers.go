package train

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

var (
	tokMu      sync.Mutex
	tokenizers = map[string]func() (Tokenizer, error){
		"bytes": func() (Tokenizer, error) { return ByteTokenizer{}, nil },
	}
)

// RegisterTokenizer makes a tokenizer available by name to the stage
// configs' `tokenizer` key. The command registers "qwen" (the Qwen3 BPE of
// internal/tokenizer); "bytes" ([ByteTokenizer]) is built in.
func RegisterTokenizer(name string, open func() (Tokenizer, error)) {
	tokMu.Lock()
	defer tokMu.Unlock()
	tokenizers[name] = open
}

// OpenTokenizer returns the tokenizer registered under name.
func OpenTokenizer(name string) (Tokenizer, error) {
	tokMu.Lock()
	open, ok := tokenizers[name]
	names := make([]string, 0, len(tokenizers))
	for n := range tokenizers {
		names = append(names, n)
	}
	tokMu.Unlock()
	if !ok {
		slices.Sort(names)
		return nil, fmt.Errorf("tokenizer %q is not known (known: %s)", name, strings.Join(names, ", "))
	}
	t, err := open()
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", name, err)
	}
	return t, nil
}
