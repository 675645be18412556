package llm

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// chatServer answers chat completions like the real API, failing the first
// `fail` requests with status code.
func chatServer(t *testing.T, fail int, code int) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := n.Add(1)
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		if got := r.Header.Get("Authorization"); got != "Bearer sk-test" {
			t.Errorf("Authorization: got %q, want the key from the environment", got)
		}
		if int(k) <= fail {
			http.Error(w, `{"error":{"message":"overloaded"}}`, code)
			return
		}
		var req struct {
			Model    string    `json:"model"`
			Messages []Message `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("bad request body: %v", err)
		}
		json.NewEncoder(w).Encode(map[string]any{
			"id": "x", "object": "chat.completion", "model": req.Model,
			"choices": []map[string]any{{"index": 0, "message": map[string]string{"role": "assistant", "content": "echo: " + req.Messages[len(req.Messages)-1].Content}, "finish_reason": "stop"}},
			"usage":   map[string]int{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
		})
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestChatRetriesAndAccounts(t *testing.T) {
	t.Setenv("MLERL_TEST_KEY", "sk-test")
	for _, tc := range []struct {
		name      string
		fail      int
		code      int
		retries   int
		wantErr   bool
		wantCalls int32
	}{
		{"first try", 0, 0, 3, false, 1},
		{"two 503s then ok", 2, 503, 3, false, 3},
		{"429 then ok", 1, 429, 3, false, 2},
		{"400 is not retried", 5, 400, 3, true, 1},
		{"gives up", 10, 503, 2, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, calls := chatServer(t, tc.fail, tc.code)
			c, err := New(Config{BaseURL: srv.URL + "/v1", APIKeyEnv: "MLERL_TEST_KEY", Model: "m", MaxRetries: tc.retries, PromptPrice: 1, CompletionPrice: 2})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Chat(context.Background(), ChatRequest{Messages: []Message{{Role: "user", Content: "hi"}}})
			if (err != nil) != tc.wantErr {
				t.Fatalf("got error %v, want error %v", err, tc.wantErr)
			}
			if got := calls.Load(); got != tc.wantCalls {
				t.Errorf("got %d requests, want %d", got, tc.wantCalls)
			}
			if tc.wantErr {
				return
			}
			if resp.Content != "echo: hi" {
				t.Errorf("got content %q, want %q", resp.Content, "echo: hi")
			}
			n, u := c.Totals()
			if n != 1 || u.PromptTokens != 10 || u.CompletionTokens != 5 || u.CostUSD != (10*1+5*2)/1e6 {
				t.Errorf("got totals %d %+v, want 1 request, 10+5 tokens, cost 2e-5", n, u)
			}
		})
	}
}

func TestChatMalformedAndRateLimit(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Write([]byte(`{"choices": [`))
	}))
	defer srv.Close()
	c, _ := New(Config{BaseURL: srv.URL, MaxRetries: 1})
	_, err := c.Chat(context.Background(), ChatRequest{Messages: []Message{{Role: "user", Content: "hi"}}})
	if err == nil || !strings.Contains(err.Error(), "malformed JSON") {
		t.Errorf("got %v, want a malformed JSON error", err)
	}

	// 4 requests at 20/s take at least 150 ms.
	srv2, _ := chatServer(t, 0, 0)
	t.Setenv("OPENAI_API_KEY", "sk-test")
	c2, _ := New(Config{BaseURL: srv2.URL + "/v1", RequestsPerSec: 20})
	start := time.Now()
	for i := 0; i < 4; i++ {
		if _, err := c2.Chat(context.Background(), ChatRequest{Messages: []Message{{Role: "user", Content: "x"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if el := time.Since(start); el < 140*time.Millisecond {
		t.Errorf("4 requests at 20/s took %v, want at least 150ms", el)
	}
}

// A request whose deadline comes before its slot under the rate limit
// fails at once with context.DeadlineExceeded, without waiting it out.
func TestRateLimitDeadline(t *testing.T) {
	srv, calls := chatServer(t, 0, 0)
	t.Setenv("OPENAI_API_KEY", "sk-test")
	c, _ := New(Config{BaseURL: srv.URL + "/v1", RequestsPerSec: 0.5})
	msg := ChatRequest{Messages: []Message{{Role: "user", Content: "x"}}}
	if _, err := c.Chat(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Chat(ctx, msg)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "requests_per_sec 0.5") {
		t.Errorf("got %v, want a requests_per_sec error wrapping context.DeadlineExceeded", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("the refused request took %v; want it refused at once, not after the 2 s slot", el)
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("server saw %d requests, want 1", got)
	}
}

func TestEmbedOrdersByIndex(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"data":[{"index":1,"embedding":[2,2]},{"index":0,"embedding":[1,1]}],"usage":{"prompt_tokens":4}}`))
	}))
	defer srv.Close()
	c, _ := New(Config{BaseURL: srv.URL})
	v, u, err := c.Embed(context.Background(), []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if v[0][0] != 1 || v[1][0] != 2 || u.PromptTokens != 4 {
		t.Errorf("got %v %+v, want inputs in order and 4 prompt tokens", v, u)
	}
	if _, _, err := c.Embed(context.Background(), []string{"a"}); err == nil {
		t.Error("2 embeddings for 1 input: got no error")
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New without base_url: got no error")
	}
}
