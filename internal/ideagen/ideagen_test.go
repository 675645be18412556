package ideagen

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/schemas"
)

func TestParseIdeas(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    []any
		wantErr string
	}{
		{"object", `{"ideas": ["a", "b"]}`, []any{"a", "b"}, ""},
		{"array", `["a", "b"]`, []any{"a", "b"}, ""},
		{"fenced with chatter", "Sure! Here they are:\n```json\n{\"ideas\": [\"a\"]}\n```\nHope this helps.", []any{"a"}, ""},
		{"trailing text", `{"ideas": ["a"]} Let me know if you need more.`, []any{"a"}, ""},
		{"other key", `{"suggestions": ["a", "b"]}`, []any{"a", "b"}, ""},
		{"objects", `{"ideas": [{"idea": "a", "why": "x"}]}`, []any{map[string]any{"idea": "a", "why": "x"}}, ""},
		{"no json", `I cannot help with that.`, nil, "no JSON in the answer"},
		{"truncated", `{"ideas": ["a", "b`, nil, "malformed JSON"},
		{"ambiguous object", `{"good": ["a"], "bad": ["b"]}`, nil, `without an "ideas" list`},
		{"scalar list item object", `{"ideas": "a, b"}`, nil, `without an "ideas" list`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseIdeas(tt.content)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, %v want %v", got, err, tt.want)
			}
		})
	}
}

// answer is one scripted reply of the fake endpoint: an HTTP status with
// a body, a chat completion with content, or a delay before answering.
type answer struct {
	status  int
	content string
	delay   time.Duration
}

type fakeChat struct {
	srv     *httptest.Server
	mu      sync.Mutex
	answers []answer
	prompts []string
}

// newFakeChat serves /v1/chat/completions with the scripted answers in
// order (the last one repeats), recording the user prompts.
func newFakeChat(t *testing.T, answers ...answer) *fakeChat {
	f := &fakeChat{answers: answers}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		var req struct {
			Model          string        `json:"model"`
			Messages       []llm.Message `json:"messages"`
			ResponseFormat struct {
				Type string `json:"type"`
			} `json:"response_format"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) != 2 || req.ResponseFormat.Type != "json_object" {
			http.Error(w, `{"error": {"message": "bad request"}}`, 400)
			return
		}
		f.mu.Lock()
		a := f.answers[0]
		if len(f.answers) > 1 {
			f.answers = f.answers[1:]
		}
		f.prompts = append(f.prompts, req.Messages[1].Content)
		f.mu.Unlock()
		time.Sleep(a.delay)
		if a.status != 0 {
			http.Error(w, a.content, a.status)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion", "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]string{"role": "assistant", "content": a.content}, "finish_reason": "stop"}},
			"usage":   map[string]int{"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
		})
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeChat) generator(t *testing.T, opts Options, timeout time.Duration) *Generator {
	c, err := llm.New(llm.Config{BaseURL: f.srv.URL + "/v1", Model: "gen-1", MaxRetries: 2, Timeout: timeout, PromptPrice: 1, CompletionPrice: 2})
	if err != nil {
		t.Fatal(err)
	}
	return New(c, opts)
}

var task = schemas.Task{TaskID: "digits", Title: "Digits", Modality: "tabular", TaskType: "multiclass-classification", Metric: "accuracy", Direction: "higher", Description: "Classify 8x8 images of digits."}

func ideas(texts ...string) string {
	b, _ := json.Marshal(map[string][]string{"ideas": texts})
	return string(b)
}

func texts(ideas []Idea) []string {
	var out []string
	for _, i := range ideas {
		out = append(out, i.Text)
	}
	return out
}

func TestGenerate(t *testing.T) {
	opts := Options{N: 4, MinIdeas: 3, MaxRounds: 3, MaxIdeaChars: 40, MaxDescriptionChars: 100, Temperature: 0.5}
	long := strings.Repeat("x", 41)
	tests := []struct {
		name         string
		answers      []answer
		want         []string
		wantRequests int
		wantRejected map[string]int
		wantErr      string
	}{
		{
			name:         "enough at once",
			answers:      []answer{{content: ideas("Scale features", "Add PCA", "Drop constant columns", "Impute with median", "One more")}},
			want:         []string{"Scale features", "Add PCA", "Drop constant columns", "Impute with median"},
			wantRequests: 1, wantRejected: map[string]int{},
		},
		{
			name:         "fenced objects, rejects counted",
			answers:      []answer{{content: "Here:\n```json\n" + `{"ideas": [{"idea": "Scale features"}, {"idea": "scale features!"}, {"text": "  "}, {"idea": "` + long + `"}, 7, {"idea": "1. Add PCA"}, {"idea": "Use 5-fold CV"}, {"idea": "Bin ages"}]}` + "\n```\nDone."}},
			want:         []string{"Scale features", "Add PCA", "Use 5-fold CV", "Bin ages"},
			wantRequests: 1, wantRejected: map[string]int{"duplicate": 1, "empty": 1, "too_long": 1, "not_text": 1},
		},
		{
			name:         "too few then the shortfall",
			answers:      []answer{{content: ideas("Scale features", "Add PCA")}, {content: ideas("Add PCA", "Bin ages", "Drop outliers")}},
			want:         []string{"Scale features", "Add PCA", "Bin ages", "Drop outliers"},
			wantRequests: 2, wantRejected: map[string]int{"duplicate": 1},
		},
		{
			name:         "malformed then good",
			answers:      []answer{{content: `{"ideas": ["Scale features", "Add`}, {content: ideas("Scale features", "Add PCA", "Bin ages", "Drop outliers")}},
			want:         []string{"Scale features", "Add PCA", "Bin ages", "Drop outliers"},
			wantRequests: 2, wantRejected: map[string]int{},
		},
		{
			name:         "500s are retried by the client",
			answers:      []answer{{status: 500, content: "overloaded"}, {status: 503, content: "busy"}, {content: ideas("Scale features", "Add PCA", "Bin ages", "Drop outliers")}},
			want:         []string{"Scale features", "Add PCA", "Bin ages", "Drop outliers"},
			wantRequests: 1, wantRejected: map[string]int{},
		},
		{
			name:         "too few after every round",
			answers:      []answer{{content: ideas("Scale features")}, {content: ideas("Scale features")}},
			wantRequests: 3, wantErr: "task digits, category data: 1 usable ideas after 3 requests, want at least 3 (last problem: no usable idea among 1 returned)",
		},
		{
			name:         "always malformed",
			answers:      []answer{{content: "no idea, sorry"}},
			wantRequests: 3, wantErr: "0 usable ideas after 3 requests, want at least 3 (last problem: no JSON in the answer",
		},
		{
			name:    "persistent 500",
			answers: []answer{{status: 500, content: `{"error": "down"}`}},
			wantErr: "task digits, category data: llm " + "http://", // the client gives up after its retries
		},
		{
			name:    "timeout",
			answers: []answer{{delay: 400 * time.Millisecond, content: ideas("late")}},
			wantErr: "Client.Timeout exceeded",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeChat(t, tt.answers...)
			got, rep, err := f.generator(t, opts, 200*time.Millisecond).Generate(context.Background(), task, schemas.CategoryData)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v want one containing %q", err, tt.wantErr)
				}
				if tt.name == "persistent 500" && !(strings.Contains(err.Error(), "giving up after 3 attempts") && strings.Contains(err.Error(), "HTTP 500")) {
					t.Errorf("got error %v, want it to give up after 3 attempts naming HTTP 500", err)
				}
				if tt.wantRequests > 0 && rep.Requests != tt.wantRequests {
					t.Errorf("got %d requests want %d", rep.Requests, tt.wantRequests)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(texts(got), tt.want) {
				t.Errorf("got ideas %q want %q", texts(got), tt.want)
			}
			if rep.Requests != tt.wantRequests || rep.Usable != len(tt.want) || !reflect.DeepEqual(rep.Rejected, tt.wantRejected) {
				t.Errorf("got report %+v, want %d requests, %d usable, rejected %v", rep, tt.wantRequests, len(tt.want), tt.wantRejected)
			}
			if rep.Usage.PromptTokens != int64(100*rep.Requests) || rep.Usage.CompletionTokens != int64(20*rep.Requests) {
				t.Errorf("got usage %+v for %d requests", rep.Usage, rep.Requests)
			}
			if want := float64(rep.Requests) * (100*1 + 20*2) / 1e6; rep.Usage.CostUSD < want*0.999 || rep.Usage.CostUSD > want*1.001 {
				t.Errorf("got cost %v want %v", rep.Usage.CostUSD, want)
			}
			for _, i := range got {
				if i.Source != "llm:gen-1" || i.Category != schemas.CategoryData || i.Edit != "" {
					t.Errorf("got idea %+v, want source llm:gen-1, category data, no edit", i)
				}
			}
		})
	}
}

func TestGeneratePromptAsksForTheShortfall(t *testing.T) {
	f := newFakeChat(t, answer{content: ideas("Scale features", "Add PCA")}, answer{content: ideas("Bin ages", "Drop outliers")})
	_, _, err := f.generator(t, Options{N: 4, MinIdeas: 4, MaxRounds: 2, MaxIdeaChars: 100, MaxDescriptionChars: 10}, 5*time.Second).Generate(context.Background(), task, schemas.CategoryModel)
	if err != nil {
		t.Fatal(err)
	}
	first, second := f.prompts[0], f.prompts[1]
	for _, want := range []string{"Propose 4 distinct", `category "model"`, "Metric: accuracy (higher is better)", "Classify 8 [...]", `{"ideas": [`} {
		if !strings.Contains(first, want) {
			t.Errorf("first prompt lacks %q:\n%s", want, first)
		}
	}
	for _, want := range []string{"Propose 2 distinct", "already taken", "- Scale features\n- Add PCA\n"} {
		if !strings.Contains(second, want) {
			t.Errorf("second prompt lacks %q:\n%s", want, second)
		}
	}
}

func TestMerge(t *testing.T) {
	cat := []Idea{{ID: "data/scale", Text: "Scale the features.", Source: SourceCatalog}}
	gen := []Idea{{Text: "scale the  features"}, {Text: "Add PCA"}}
	got := texts(Merge(cat, gen))
	if want := []string{"Scale the features.", "Add PCA"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %q want %q", got, want)
	}
}

func TestCatalog(t *testing.T) {
	for _, cat := range schemas.Categories {
		for _, i := range Catalog(task, cat) {
			if i.Category != cat || i.Source != SourceCatalog || i.ID == "" || !strings.HasPrefix(i.Edit, `{"ops":`) {
				t.Errorf("got catalog idea %+v for category %s", i, cat)
			}
		}
	}
}
