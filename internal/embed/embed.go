// Package embed turns idea texts into vectors for the diversity filter.
// Three [Embedder]s share one interface:
//
//   - [Hashed]: built in, needs no model: hashed word and character n-gram
//     TF-IDF, L2-normalised, fixed dimension (default 384).
//   - [Remote]: an OpenAI-compatible /v1/embeddings endpoint through
//     internal/llm, in batches.
//   - [ONNX]: a local sentence-embedding model (model.onnx + tokenizer.json)
//     run with ONNX Runtime (github.com/yalue/onnxruntime_go), mean-pooled
//     over the attention mask and L2-normalised.
//
// Start with [Config] and [New], which build the embedder a stage config
// names; every embedder returns unit-length vectors (or all-zero vectors
// for texts with no features), so a dot product is a cosine similarity.
package embed

import (
	"context"
	"math"
	"os"
	"path/filepath"

	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/deps"
	"github.com/mlerl/mlerl/internal/llm"
)

// Embedder maps texts to vectors of one fixed dimension.
type Embedder interface {
	// Embed returns one vector per text, in input order. Vectors have
	// length Dim() and unit L2 norm (zero for a text without features).
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	// Dim is the vector dimension (0 for a remote model not yet called).
	Dim() int
	// Name identifies the embedder and its model for manifests, e.g.
	// "hashed-tfidf:384" or "openai:text-embedding-3-small".
	Name() string
}

// Embedder kinds accepted by [Config.Kind].
const (
	KindHashed = "hashed"
	KindOpenAI = "openai"
	KindONNX   = "onnx"
)

// Config selects and configures an embedder; it is embedded in stage
// configs under the key "embed".
type Config struct {
	Kind string `yaml:"kind" help:"embedder: hashed (built in, no model), openai (an /v1/embeddings endpoint) or onnx (a local model.onnx + tokenizer.json)"`
	Dim  int    `yaml:"dim" help:"vector dimension of the hashed embedder"`
	// BatchSize bounds the texts per request (openai) or per model run (onnx).
	BatchSize int `yaml:"batch_size" help:"texts per embeddings request or ONNX run"`
	// LLM is the embeddings endpoint for kind openai.
	LLM llm.Config `yaml:"llm"`
	// ONNX model files for kind onnx.
	ModelPath     string `yaml:"model" help:"ONNX sentence-embedding model file (kind onnx)"`
	TokenizerPath string `yaml:"tokenizer" help:"its HF tokenizer.json (WordLevel or WordPiece model; kind onnx)"`
	LibraryPath   string `yaml:"onnxruntime_library" help:"ONNX Runtime shared library (empty: onnxruntime/libonnxruntime.so.1 in $MLERL_DEPS, or in .deps in the working directory, the binary's folder or a parent of either; installed by make setup)"`
	MaxTokens     int    `yaml:"max_tokens" help:"truncate each text to this many tokens (kind onnx)"`
}

// DefaultConfig is the built-in hashed embedder with 384 dimensions;
// 64 texts per request or model run; 128 tokens per text for ONNX models.
func DefaultConfig() Config {
	c := llm.DefaultConfig()
	c.Model = "text-embedding-3-small"
	return Config{Kind: KindHashed, Dim: 384, BatchSize: 64, LLM: c, MaxTokens: 128}
}

// Validate checks every field and those the chosen kind needs; keys in
// errors are relative ("dim"), a stage config nests them with
// config.Nest ("embed.dim").
func (c Config) Validate() error {
	switch c.Kind {
	case KindHashed:
		if c.Dim <= 0 {
			return config.Errorf("dim", c.Dim, "must be positive for the hashed embedder")
		}
	case KindOpenAI:
		if !c.LLM.Enabled() {
			return config.Errorf("kind", c.Kind, "needs embed.llm.base_url (an OpenAI-compatible /v1/embeddings endpoint)")
		}
	case KindONNX:
		if c.ModelPath == "" {
			return config.Errorf("kind", c.Kind, "needs embed.model (a model.onnx file) and embed.tokenizer (its tokenizer.json)")
		}
		if c.TokenizerPath == "" {
			return config.Errorf("kind", c.Kind, "needs embed.tokenizer (the tokenizer.json of %s)", c.ModelPath)
		}
	default:
		return config.Errorf("kind", c.Kind, "want %s, %s or %s", KindHashed, KindOpenAI, KindONNX)
	}
	switch {
	case c.Dim < 0:
		return config.Errorf("dim", c.Dim, "must not be negative")
	case c.BatchSize <= 0:
		return config.Errorf("batch_size", c.BatchSize, "must be positive")
	case c.MaxTokens <= 0:
		return config.Errorf("max_tokens", c.MaxTokens, "must be positive")
	}
	return config.Nest("llm", c.LLM.Validate())
}

// New builds the embedder cfg names. The caller closes it when it has a
// Close method (the ONNX embedder holds a session); [Close] does that.
func New(cfg Config) (Embedder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, config.Nest("embed", err)
	}
	switch cfg.Kind {
	case KindOpenAI:
		c, err := llm.New(cfg.LLM)
		if err != nil {
			return nil, err
		}
		return NewRemote(c, cfg.BatchSize), nil
	case KindONNX:
		return NewONNX(ONNXOptions{
			ModelPath: cfg.ModelPath, TokenizerPath: cfg.TokenizerPath,
			LibraryPath: cfg.LibraryPath, MaxTokens: cfg.MaxTokens, BatchSize: cfg.BatchSize,
		})
	default:
		return NewHashed(cfg.Dim), nil
	}
}

// Close releases an embedder's resources if it holds any.
func Close(e Embedder) error {
	if c, ok := e.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}

// DefaultLibraryPath is where `make setup` installs ONNX Runtime,
// onnxruntime/libonnxruntime.so.1 in the deps folder, as [deps.Find]
// finds it ($MLERL_DEPS, else .deps in the working directory or the
// binary's folder, or one of their parents). When it is nowhere, the
// path under $MLERL_DEPS (or ./.deps) is returned, which the loader then
// reports as missing.
func DefaultLibraryPath() string {
	const rel = "onnxruntime/libonnxruntime.so.1"
	if p, err := deps.Find(rel); err == nil {
		return p
	}
	d := os.Getenv(deps.Env)
	if d == "" {
		d = ".deps"
	}
	return filepath.Join(d, rel)
}

// normalize scales v to unit L2 norm in place; a zero vector stays zero.
func normalize(v []float32) {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	if s == 0 {
		return
	}
	inv := float32(1 / math.Sqrt(s))
	for i := range v {
		v[i] *= inv
	}
}
