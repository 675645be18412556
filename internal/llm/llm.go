// Package llm is a small client for OpenAI-compatible HTTP APIs: chat
// completions (/v1/chat/completions) and embeddings (/v1/embeddings). It
// retries transient failures with exponential backoff, honours a
// requests-per-second limit, and accounts tokens and cost.
//
// Start with [New] and [Client.Chat]. Every part of mlerl that talks to an
// LLM (idea generation, the editor, the instrumenter, the LLM expert, the
// embedder) goes through this client.
package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/textutil"
)

// Config configures a client. Zero fields take the defaults of [DefaultConfig].
type Config struct {
	BaseURL        string        `yaml:"base_url" help:"OpenAI-compatible API base URL, e.g. http://localhost:8000/v1 (empty: offline)"`
	APIKeyEnv      string        `yaml:"api_key_env" help:"environment variable holding the API key"`
	Model          string        `yaml:"model" help:"model name sent with each request"`
	Timeout        time.Duration `yaml:"timeout" help:"per-request timeout"`
	MaxRetries     int           `yaml:"max_retries" help:"retries on 429, 5xx and network errors"`
	RequestsPerSec float64       `yaml:"requests_per_sec" help:"client-side rate limit (0: none)"`
	// Prices in USD per million tokens, for cost accounting.
	PromptPrice     float64 `yaml:"prompt_price" help:"USD per million prompt tokens"`
	CompletionPrice float64 `yaml:"completion_price" help:"USD per million completion tokens"`
}

// DefaultConfig returns the defaults: no endpoint (offline), key from
// OPENAI_API_KEY, 120 s timeout, 4 retries, no rate limit.
func DefaultConfig() Config {
	return Config{APIKeyEnv: "OPENAI_API_KEY", Timeout: 120 * time.Second, MaxRetries: 4}
}

// Validate checks every field; keys in errors are relative ("timeout"),
// a stage config nests them with config.Nest ("llm.timeout"). Zero
// timeout and empty api_key_env take the defaults; an empty base_url is
// offline.
func (c Config) Validate() error {
	if c.BaseURL != "" {
		u, err := url.Parse(c.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return config.Errorf("base_url", c.BaseURL, "want an http:// or https:// URL such as http://localhost:8000/v1 (empty: offline)")
		}
	}
	switch {
	case strings.ContainsAny(c.APIKeyEnv, "= \t\n"):
		return config.Errorf("api_key_env", c.APIKeyEnv, "want the name of an environment variable, not the key itself")
	case c.Timeout < 0:
		return config.Errorf("timeout", c.Timeout, "must not be negative (0: %s)", DefaultConfig().Timeout)
	case c.MaxRetries < 0:
		return config.Errorf("max_retries", c.MaxRetries, "must not be negative")
	case !(c.RequestsPerSec >= 0) || math.IsInf(c.RequestsPerSec, 0):
		return config.Errorf("requests_per_sec", c.RequestsPerSec, "must be a number >= 0 (0: no limit)")
	case !(c.PromptPrice >= 0) || math.IsInf(c.PromptPrice, 0):
		return config.Errorf("prompt_price", c.PromptPrice, "must be a number >= 0 (USD per million tokens)")
	case !(c.CompletionPrice >= 0) || math.IsInf(c.CompletionPrice, 0):
		return config.Errorf("completion_price", c.CompletionPrice, "must be a number >= 0 (USD per million tokens)")
	}
	return nil
}

// Enabled reports whether an endpoint is configured.
func (c Config) Enabled() bool { return c.BaseURL != "" }

// Client talks to one endpoint with one model.
type Client struct {
	cfg  Config
	http *http.Client
	key  string

	limit *rate.Limiter // requests_per_sec (rate.Inf: no limit)

	promptTokens     atomic.Int64
	completionTokens atomic.Int64
	requests         atomic.Int64
}

// New returns a client. It fails when no base URL is configured.
func New(cfg Config) (*Client, error) {
	d := DefaultConfig()
	if cfg.BaseURL == "" {
		return nil, errors.New("llm: no base_url configured")
	}
	if err := cfg.Validate(); err != nil {
		return nil, config.Nest("llm", err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = d.Timeout
	}
	if cfg.APIKeyEnv == "" {
		cfg.APIKeyEnv = d.APIKeyEnv
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	// Burst 1: requests start at least 1/requests_per_sec apart, the
	// first at once.
	limit := rate.NewLimiter(rate.Inf, 0)
	if cfg.RequestsPerSec > 0 {
		limit = rate.NewLimiter(rate.Limit(cfg.RequestsPerSec), 1)
	}
	return &Client{cfg: cfg, http: &http.Client{Timeout: cfg.Timeout}, key: os.Getenv(cfg.APIKeyEnv), limit: limit}, nil
}

// Model returns the configured model name.
func (c *Client) Model() string { return c.cfg.Model }

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatRequest is a chat-completions request.
type ChatRequest struct {
	Messages    []Message `json:"messages"`
	Temperature *float64  `json:"temperature,omitempty"`
	MaxTokens   int       `json:"max_tokens,omitempty"`
	Stop        []string  `json:"stop,omitempty"`
	Seed        *int64    `json:"seed,omitempty"`
	// JSON asks for a JSON object response (response_format json_object).
	JSON bool `json:"-"`
}

// Usage counts tokens of one or more requests.
type Usage struct {
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	CostUSD          float64 `json:"cost_usd"`
}

// ChatResponse is the first choice of a completion and its usage.
type ChatResponse struct {
	Content      string
	FinishReason string
	Usage        Usage
	Latency      time.Duration
}

// APIError is a non-2xx answer from the endpoint.
type APIError struct {
	Status     int
	Body       string
	URL        string
	retryAfter time.Duration
}

func (e *APIError) Error() string {
	return fmt.Sprintf("llm %s: HTTP %d: %s", e.URL, e.Status, textutil.Clip(e.Body, 300))
}

// Temporary reports whether retrying may help.
func (e *APIError) Temporary() bool { return e.Status == 429 || e.Status >= 500 }

// Chat sends a chat-completions request.
func (c *Client) Chat(ctx context.Context, req ChatRequest) (*ChatResponse, error) {
	body := map[string]any{"model": c.cfg.Model, "messages": req.Messages}
	if req.Temperature != nil {
		body["temperature"] = *req.Temperature
	}
	if req.MaxTokens > 0 {
		body["max_tokens"] = req.MaxTokens
	}
	if len(req.Stop) > 0 {
		body["stop"] = req.Stop
	}
	if req.Seed != nil {
		body["seed"] = *req.Seed
	}
	if req.JSON {
		body["response_format"] = map[string]string{"type": "json_object"}
	}
	var out struct {
		Choices []struct {
			Message      Message `json:"message"`
			FinishReason string  `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	start := time.Now()
	if err := c.post(ctx, "/chat/completions", body, &out); err != nil {
		return nil, err
	}
	if len(out.Choices) == 0 {
		return nil, fmt.Errorf("llm %s/chat/completions: response has no choices", c.cfg.BaseURL)
	}
	u := c.account(out.Usage.PromptTokens, out.Usage.CompletionTokens)
	return &ChatResponse{Content: out.Choices[0].Message.Content, FinishReason: out.Choices[0].FinishReason, Usage: u, Latency: time.Since(start)}, nil
}

// Embed returns one embedding per input, in input order.
func (c *Client) Embed(ctx context.Context, inputs []string) ([][]float32, Usage, error) {
	var out struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int64 `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := c.post(ctx, "/embeddings", map[string]any{"model": c.cfg.Model, "input": inputs}, &out); err != nil {
		return nil, Usage{}, err
	}
	if len(out.Data) != len(inputs) {
		return nil, Usage{}, fmt.Errorf("llm %s/embeddings: %d embeddings for %d inputs", c.cfg.BaseURL, len(out.Data), len(inputs))
	}
	vecs := make([][]float32, len(inputs))
	for _, d := range out.Data {
		if d.Index < 0 || d.Index >= len(inputs) || vecs[d.Index] != nil {
			return nil, Usage{}, fmt.Errorf("llm %s/embeddings: bad or repeated index %d", c.cfg.BaseURL, d.Index)
		}
		vecs[d.Index] = d.Embedding
	}
	return vecs, c.account(out.Usage.PromptTokens, 0), nil
}

// Totals returns the tokens and cost of every request so far.
func (c *Client) Totals() (requests int64, u Usage) {
	p, q := c.promptTokens.Load(), c.completionTokens.Load()
	return c.requests.Load(), Usage{PromptTokens: p, CompletionTokens: q, CostUSD: c.cost(p, q)}
}

func (c *Client) cost(p, q int64) float64 {
	return (float64(p)*c.cfg.PromptPrice + float64(q)*c.cfg.CompletionPrice) / 1e6
}

func (c *Client) account(p, q int64) Usage {
	c.promptTokens.Add(p)
	c.completionTokens.Add(q)
	c.requests.Add(1)
	return Usage{PromptTokens: p, CompletionTokens: q, CostUSD: c.cost(p, q)}
}

// post sends a JSON request with retries and decodes the JSON answer.
func (c *Client) post(ctx context.Context, path string, body any, out any) error {
	payload, err := json.Marshal(body)
	if err != nil {
		return err
	}
	url := c.cfg.BaseURL + path
	var last error
	for attempt := 0; attempt <= c.cfg.MaxRetries; attempt++ {
		if attempt > 0 {
			backoff := time.Duration(float64(200*time.Millisecond) * float64(int(1)<<(attempt-1)) * (0.5 + rand.Float64()))
			var ae *APIError
			if errors.As(last, &ae) && ae.retryAfter > 0 {
				backoff = ae.retryAfter
			}
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := c.limit.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// The deadline comes before the next free slot: fail now.
			return fmt.Errorf("llm %s: requests_per_sec %g: %w (%v)", url, c.cfg.RequestsPerSec, context.DeadlineExceeded, err)
		}
		last = c.once(ctx, url, payload, out)
		if last == nil {
			return nil
		}
		if !retryable(ctx, last) {
			return last
		}
	}
	return fmt.Errorf("llm %s: giving up after %d attempts: %w", url, c.cfg.MaxRetries+1, last)
}

func (c *Client) once(ctx context.Context, url string, payload []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("llm %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("llm %s: reading response: %w", url, err)
	}
	if resp.StatusCode/100 != 2 {
		ae := &APIError{Status: resp.StatusCode, Body: string(b), URL: url}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 && s < 60 {
			ae.retryAfter = time.Duration(s) * time.Second
		}
		return ae
	}
	if err := json.Unmarshal(b, out); err != nil {
		return &decodeError{fmt.Errorf("llm %s: malformed JSON response (%v): %s", url, err, textutil.Clip(string(b), 200))}
	}
	return nil
}

type decodeError struct{ error }

func (e *decodeError) Unwrap() error { return e.error }

func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Temporary()
	}
	var de *decodeError
	if errors.As(err, &de) {
		return true // a truncated body from a proxy; a retry usually succeeds
	}
	return true // network errors and timeouts
}
