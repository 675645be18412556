package embed

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mlerl/mlerl/internal/llm"
)

// fakeEmbeddings serves /v1/embeddings: the vector of a text is
// (len(text), 1, 0, ...) of dimension dim, answered in reverse index order.
// The first `fail` requests get HTTP 500.
func fakeEmbeddings(t *testing.T, dim int, fail int32) (*httptest.Server, *atomic.Int32, *[]int) {
	var calls atomic.Int32
	var sizes []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/embeddings" {
			http.NotFound(w, r)
			return
		}
		if calls.Add(1) <= fail {
			http.Error(w, `{"error": {"message": "overloaded"}}`, http.StatusInternalServerError)
			return
		}
		var req struct {
			Model string   `json:"model"`
			Input []string `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		sizes = append(sizes, len(req.Input))
		type item struct {
			Object    string    `json:"object"`
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		var data []item
		for i := len(req.Input) - 1; i >= 0; i-- {
			v := make([]float32, dim)
			v[0], v[1] = float32(len(req.Input[i])), 1
			if strings.Contains(req.Input[i], "short") {
				v = v[:dim-1]
			}
			data = append(data, item{"embedding", i, v})
		}
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": req.Model,
			"usage": map[string]int{"prompt_tokens": 3 * len(req.Input), "total_tokens": 3 * len(req.Input)}})
	}))
	t.Cleanup(srv.Close)
	return srv, &calls, &sizes
}

func TestRemoteEmbedder(t *testing.T) {
	srv, calls, sizes := fakeEmbeddings(t, 4, 1)
	c, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "emb-small", MaxRetries: 2, Timeout: 5 * time.Second, PromptPrice: 1})
	if err != nil {
		t.Fatal(err)
	}
	e := NewRemote(c, 2)
	texts := []string{"a", "bbb", "cc", "dddd", "e"}
	vecs, err := e.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	if got := *sizes; len(got) != 3 || got[0] != 2 || got[2] != 1 {
		t.Errorf("got batch sizes %v want [2 2 1]", got)
	}
	if calls.Load() != 4 {
		t.Errorf("got %d requests want 4 (one 500 retried)", calls.Load())
	}
	for i, text := range texts {
		l := float64(len(text))
		want0 := l / math.Sqrt(l*l+1)
		if math.Abs(float64(vecs[i][0])-want0) > 1e-6 || len(vecs[i]) != 4 {
			t.Errorf("text %q: got %v, want its own normalised vector (first component %.4f)", text, vecs[i], want0)
		}
	}
	if e.Dim() != 4 || e.Name() != "openai:emb-small" {
		t.Errorf("got dim %d name %q", e.Dim(), e.Name())
	}
	if u := e.Usage(); u.PromptTokens != 15 {
		t.Errorf("got %d prompt tokens want 15", u.PromptTokens)
	}
}

func TestRemoteEmbedderErrors(t *testing.T) {
	srv, _, _ := fakeEmbeddings(t, 4, 0)
	c, _ := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "m", MaxRetries: 0, Timeout: 5 * time.Second})
	_, err := NewRemote(c, 8).Embed(context.Background(), []string{"long one", "short"})
	if err == nil || !strings.Contains(err.Error(), "embed text 1: endpoint returned a 3-dimensional embedding after 4-dimensional ones") {
		t.Errorf("got error %v, want a dimension mismatch naming text 1", err)
	}
	down, _, _ := fakeEmbeddings(t, 4, 100)
	c, _ = llm.New(llm.Config{BaseURL: down.URL + "/v1", Model: "m", MaxRetries: 1, Timeout: 5 * time.Second})
	_, err = NewRemote(c, 8).Embed(context.Background(), []string{"x"})
	if err == nil || !strings.Contains(err.Error(), "HTTP 500") {
		t.Errorf("got error %v, want the HTTP 500 after retries", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		want string // the whole message; "" for valid
	}{
		{"default", func(*Config) {}, ""},
		{"unknown kind", func(c *Config) { c.Kind = "bert" }, `kind "bert": want hashed, openai or onnx`},
		{"openai without url", func(c *Config) { c.Kind = KindOpenAI }, `kind "openai": needs embed.llm.base_url (an OpenAI-compatible /v1/embeddings endpoint)`},
		{"onnx without files", func(c *Config) { c.Kind = KindONNX }, `kind "onnx": needs embed.model (a model.onnx file) and embed.tokenizer (its tokenizer.json)`},
		{"onnx without tokenizer", func(c *Config) { c.Kind, c.ModelPath = KindONNX, "m.onnx" }, `kind "onnx": needs embed.tokenizer (the tokenizer.json of m.onnx)`},
		{"zero dim", func(c *Config) { c.Dim = 0 }, "dim 0: must be positive for the hashed embedder"},
		{"negative dim", func(c *Config) { c.Kind, c.LLM.BaseURL, c.Dim = KindOpenAI, "http://x", -1 }, "dim -1: must not be negative"},
		{"zero batch", func(c *Config) { c.BatchSize = 0 }, "batch_size 0: must be positive"},
		{"zero max_tokens", func(c *Config) { c.MaxTokens = 0 }, "max_tokens 0: must be positive"},
		{"bad endpoint", func(c *Config) { c.LLM.BaseURL = "x" }, `llm.base_url "x": want an http:// or https:// URL such as http://localhost:8000/v1 (empty: offline)`},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.edit(&c)
		got := ""
		if err := c.Validate(); err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("%s: got %q want %q", tt.name, got, tt.want)
		}
	}
	if _, err := New(Config{Kind: "bert"}); err == nil || err.Error() != `embed.kind "bert": want hashed, openai or onnx` {
		t.Errorf("New: got %v", err)
	}
}
