package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/embed"
	"github.com/mlerl/mlerl/internal/embed/onnxtest"
	"github.com/mlerl/mlerl/internal/ideagen"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

var ideaTestTasks = []schemas.Task{
	{TaskID: "digits", Title: "Digits", Modality: "tabular", TaskType: "multiclass-classification", Metric: "accuracy", Direction: "higher", Split: schemas.HeldIn, Description: "Classify digits."},
	{TaskID: "reviews", Title: "Reviews", Modality: "text", TaskType: "binary-classification", Metric: "roc_auc", Direction: "higher", Split: schemas.HeldOut, Description: "Classify reviews."},
}

// writeTestTasks commits a tasks dataset into a fresh data root.
func writeTestTasks(t *testing.T) (string, store.Store, *datasets.Manifest) {
	t.Helper()
	ctx := context.Background()
	root := t.TempDir()
	st, err := store.Open(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	p, err := datasets.Begin(ctx, st, schemas.Tasks.Name, schemas.Tasks, "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := datasets.WritePart(ctx, p, "part-00000.parquet", ideaTestTasks); err != nil {
		t.Fatal(err)
	}
	m, err := p.Commit(ctx, datasets.CommitOptions{Producer: datasets.Producer{Command: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	return root, st, m
}

func readIdeas(t *testing.T, st store.Store) ([]schemas.Idea, *datasets.Manifest) {
	t.Helper()
	m, err := datasets.Latest(context.Background(), st, schemas.Ideas.Name)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := datasets.ReadAll[schemas.Idea](context.Background(), st, m, schemas.Ideas)
	if err != nil {
		t.Fatal(err)
	}
	return rows, m
}

// checkPools checks the invariants every ideas dataset keeps, per task and
// category: at most k kept, ranks 0..kept-1, unit embeddings of dim.
func checkPools(t *testing.T, rows []schemas.Idea, k, dim int) map[string]int {
	t.Helper()
	kept := map[string]int{}
	ranks := map[string][]bool{}
	for _, r := range rows {
		pool := r.TaskID + "/" + r.Category
		if len(r.Embedding) != dim {
			t.Fatalf("idea %s: got embedding dim %d want %d", r.IdeaID, len(r.Embedding), dim)
		}
		var n float64
		for _, x := range r.Embedding {
			n += float64(x) * float64(x)
		}
		if math.Abs(n-1) > 1e-4 {
			t.Errorf("idea %s: got embedding norm² %v want 1", r.IdeaID, n)
		}
		if r.Kept != (r.Rank >= 0) {
			t.Errorf("idea %s: kept %v with rank %d", r.IdeaID, r.Kept, r.Rank)
		}
		if r.Kept {
			kept[pool]++
			if ranks[pool] == nil {
				ranks[pool] = make([]bool, k)
			}
			if int(r.Rank) >= k || ranks[pool][r.Rank] {
				t.Errorf("idea %s: rank %d out of range or repeated", r.IdeaID, r.Rank)
			} else {
				ranks[pool][r.Rank] = true
			}
		}
	}
	for pool, n := range kept {
		if n > k {
			t.Errorf("pool %s: got %d kept want at most %d", pool, n, k)
		}
		for r := range n {
			if !ranks[pool][r] {
				t.Errorf("pool %s: rank %d missing among %d kept", pool, r, n)
			}
		}
	}
	return kept
}

func TestRunIdeasCatalog(t *testing.T) {
	root, st, tasks := writeTestTasks(t)
	cfg := DefaultIdeasConfig()
	cfg.Data, cfg.K = root, 3
	var log bytes.Buffer
	if err := runIdeas(context.Background(), cfg, &log, &log); err != nil {
		t.Fatal(err)
	}
	rows, m := readIdeas(t, st)
	if len(m.Parents) != 1 || m.Parents[0].Name != schemas.Tasks.Name || m.Parents[0].Version != tasks.Version {
		t.Errorf("got parents %+v, want the tasks dataset v%d", m.Parents, tasks.Version)
	}
	want := 0
	for _, task := range ideaTestTasks {
		for _, cat := range schemas.Categories {
			want += len(ideagen.Catalog(task, cat))
		}
	}
	if len(rows) != want {
		t.Fatalf("got %d rows want %d (the catalog's ideas for the test tasks)", len(rows), want)
	}
	checkPools(t, rows, 3, 384)
	for _, r := range rows {
		if r.Source != ideagen.SourceCatalog || !strings.HasPrefix(r.Edit, `{"ops":`) || !strings.HasPrefix(r.IdeaID, r.TaskID+"/"+r.Category+"/") {
			t.Errorf("got row %+v, want a catalog idea with its edit and a <task>/<catalog id> id", r)
		}
	}
	if m.Extra["embedder"] != "hashed-tfidf:384" || m.Extra["k"] != float64(3) {
		t.Errorf("got manifest extra %v", m.Extra)
	}
	if !strings.Contains(log.String(), "MEAN_DIST_KEPT") || !strings.Contains(log.String(), "ingest ideas: wrote ") {
		t.Errorf("got log %q, want the summary table and the dataset written", log.String())
	}
}

// fakeAPI serves /v1/chat/completions (12 ideas per request, 2 of them
// duplicates, about the category named in the prompt) and /v1/embeddings
// (8-d vectors from the text's hash; texts ending in "(again)" get the
// vector of the text without that suffix: near-duplicates).
// failTask makes chat requests about that task fail with HTTP 500.
func fakeAPI(t *testing.T, failTask string) *httptest.Server {
	catRe := regexp.MustCompile(`category "(\w+)"`)
	taskRe := regexp.MustCompile(`\((\w+)\)\n`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
			Input    []string                   `json:"input"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		switch r.URL.Path {
		case "/v1/chat/completions":
			prompt := req.Messages[len(req.Messages)-1].Content
			cat, task := catRe.FindStringSubmatch(prompt)[1], taskRe.FindStringSubmatch(prompt)[1]
			if task == failTask {
				http.Error(w, `{"error": "down"}`, 500)
				return
			}
			var ideas []string
			for i := range 10 {
				ideas = append(ideas, fmt.Sprintf("Idea %d about the %s of %s", i, cat, task))
			}
			ideas = append(ideas, ideas[0], ideas[1]+" (again)")
			content, _ := json.Marshal(map[string][]string{"ideas": ideas})
			json.NewEncoder(w).Encode(map[string]any{
				"choices": []any{map[string]any{"message": map[string]string{"role": "assistant", "content": string(content)}, "finish_reason": "stop"}},
				"usage":   map[string]int{"prompt_tokens": 50, "completion_tokens": 70},
			})
		case "/v1/embeddings":
			var data []any
			for i, text := range req.Input {
				h := sha256.Sum256([]byte(strings.TrimSuffix(text, " (again)")))
				v := make([]float32, 8)
				for j := range v {
					v[j] = float32(h[j]) - 127.5
				}
				if strings.HasSuffix(text, " (again)") {
					v[0] += 1
				}
				data = append(data, map[string]any{"index": i, "embedding": v})
			}
			json.NewEncoder(w).Encode(map[string]any{"data": data, "usage": map[string]int{"prompt_tokens": 5 * len(req.Input)}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func llmIdeasConfig(root, url string) IdeasConfig {
	cfg := DefaultIdeasConfig()
	cfg.Data, cfg.Source, cfg.K = root, IdeasFromLLM, 4
	cfg.LLM.BaseURL, cfg.LLM.Model, cfg.LLM.MaxRetries, cfg.LLM.Timeout, cfg.LLM.PromptPrice = url+"/v1", "gen-1", 0, 5*time.Second, 1
	cfg.Gen.N, cfg.Gen.MinIdeas, cfg.Gen.MaxRounds = 12, 5, 2
	cfg.Embed.Kind = embed.KindOpenAI
	cfg.Embed.LLM.BaseURL, cfg.Embed.LLM.Model, cfg.Embed.BatchSize = url+"/v1", "emb-1", 5
	return cfg
}

func TestRunIdeasLLM(t *testing.T) {
	root, st, _ := writeTestTasks(t)
	srv := fakeAPI(t, "")
	var log bytes.Buffer
	if err := runIdeas(context.Background(), llmIdeasConfig(root, srv.URL), &log, &log); err != nil {
		t.Fatal(err)
	}
	rows, m := readIdeas(t, st)
	// 11 usable ideas per pool (one exact duplicate rejected); the
	// generator asks again for the shortfall of one and gets only repeats.
	if want := 2 * 3 * 11; len(rows) != want {
		t.Fatalf("got %d rows want %d", len(rows), want)
	}
	kept := checkPools(t, rows, 4, 8)
	for _, task := range ideaTestTasks {
		for _, cat := range schemas.Categories {
			if n := kept[task.TaskID+"/"+cat]; n != 4 {
				t.Errorf("pool %s/%s: got %d kept want 4", task.TaskID, cat, n)
			}
		}
	}
	for _, r := range rows {
		if r.Source != "llm:gen-1" || r.Edit != "" || !strings.HasPrefix(r.IdeaID, r.TaskID+"/"+r.Category+"/llm-") {
			t.Errorf("got row %+v, want an llm:gen-1 idea without edit", r)
		}
		if strings.HasSuffix(r.Text, "(again)") && r.Kept && r.NearestKeptSim > 0.9 {
			t.Errorf("near-duplicate %q kept with similarity %v to another kept idea", r.Text, r.NearestKeptSim)
		}
	}
	llmExtra, _ := m.Extra["llm"].(map[string]any)
	if llmExtra["requests"] != float64(12) || llmExtra["prompt_tokens"] != float64(600) || llmExtra["completion_tokens"] != float64(840) {
		t.Errorf("got llm accounting %v, want 12 requests (2 per pool), 600 prompt and 840 completion tokens", llmExtra)
	}
	if eu, _ := m.Extra["embed_usage"].(map[string]any); eu["prompt_tokens"] != float64(5*len(rows)) {
		t.Errorf("got embeddings usage %v, want %d prompt tokens", m.Extra["embed_usage"], 5*len(rows))
	}
	if !strings.Contains(log.String(), "llm: 12 requests") {
		t.Errorf("got log %q, want the token summary", log.String())
	}
}

func TestRunIdeasFailureCommitsNothing(t *testing.T) {
	root, st, _ := writeTestTasks(t)
	srv := fakeAPI(t, "reviews")
	err := runIdeas(context.Background(), llmIdeasConfig(root, srv.URL), &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "task reviews") || !strings.Contains(err.Error(), "HTTP 500") {
		t.Fatalf("got error %v, want one naming task reviews and HTTP 500", err)
	}
	if _, err := datasets.Latest(context.Background(), st, schemas.Ideas.Name); !errors.Is(err, datasets.ErrNoDataset) {
		t.Errorf("got %v after a failed run, want no committed ideas dataset", err)
	}
}

func TestRunIdeasBadInput(t *testing.T) {
	root, _, _ := writeTestTasks(t)
	tests := []struct {
		name string
		edit func(*IdeasConfig)
		want string
	}{
		{"no tasks dataset", func(c *IdeasConfig) { c.Data = t.TempDir() }, "run `mlerl ingest tasks` first"},
		{"unknown task", func(c *IdeasConfig) { c.Only = []string{"nope"} }, `task "nope" (from only) is not in tasks v1`},
		{"missing version", func(c *IdeasConfig) { c.Tasks = "tasks/v7" }, `tasks dataset "tasks/v7"`},
		{"llm without endpoint", func(c *IdeasConfig) { c.Source = IdeasFromLLM }, `source "llm": needs llm.base_url`},
		{"bad source", func(c *IdeasConfig) { c.Source = "web" }, `source "web"`},
		{"bad k", func(c *IdeasConfig) { c.K = 0 }, "k 0: must be at least 1"},
		{"bad embedder", func(c *IdeasConfig) { c.Embed.Kind = "bert" }, `embed.kind "bert"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultIdeasConfig()
			cfg.Data = root
			tt.edit(&cfg)
			err := cfg.Validate()
			if err == nil {
				err = runIdeas(context.Background(), cfg, &bytes.Buffer{}, &bytes.Buffer{})
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got error %v want one containing %q", err, tt.want)
			}
		})
	}
}

func TestRunIdeasTasksURI(t *testing.T) {
	root, _, tasks := writeTestTasks(t)
	out := t.TempDir()
	cfg := DefaultIdeasConfig()
	cfg.Data, cfg.Tasks, cfg.Only = out, root+"/tasks/v1", []string{"digits"}
	if err := runIdeas(context.Background(), cfg, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	st, _ := store.Open(context.Background(), out)
	rows, m := readIdeas(t, st)
	if m.Parents[0].URI != tasks.Ref().URI {
		t.Errorf("got parent %+v want %+v", m.Parents[0], tasks.Ref())
	}
	for _, r := range rows {
		if r.TaskID != "digits" {
			t.Errorf("got a row for task %s, want only digits", r.TaskID)
		}
	}
}

// TestRunIdeasONNX runs the stage with the ONNX embedder on a real ONNX
// file: a token-embedding model over a word vocabulary built from the
// catalog's idea texts.
func TestRunIdeasONNX(t *testing.T) {
	lib, ok := onnxtest.Library()
	if !ok {
		t.Skip("ONNX Runtime library not installed: run `make setup`")
	}
	root, st, _ := writeTestTasks(t)
	var words []string
	for _, cat := range schemas.Categories {
		for _, idea := range ideagen.Catalog(ideaTestTasks[0], cat) {
			words = append(words, strings.Fields(strings.ToLower(idea.Text))...)
		}
	}
	tok := onnxtest.WordLevelTokenizer(words)
	var vocab struct {
		Model struct{ Vocab map[string]int } `json:"model"`
	}
	json.Unmarshal(tok, &vocab)
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/model.onnx", onnxtest.TokenEmbeddingModel(onnxtest.Table(len(vocab.Model.Vocab), 16)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/tokenizer.json", tok, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultIdeasConfig()
	cfg.Data, cfg.Only, cfg.K = root, []string{"digits"}, 5
	cfg.Embed.Kind, cfg.Embed.ModelPath, cfg.Embed.TokenizerPath, cfg.Embed.LibraryPath = embed.KindONNX, dir+"/model.onnx", dir+"/tokenizer.json", lib
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := runIdeas(context.Background(), cfg, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	rows, m := readIdeas(t, st)
	kept := checkPools(t, rows, 5, 16)
	for _, cat := range schemas.Categories {
		if want := min(5, len(ideagen.Catalog(ideaTestTasks[0], cat))); kept["digits/"+cat] < 1 || kept["digits/"+cat] > want {
			t.Errorf("pool digits/%s: got %d kept, want 1 to %d", cat, kept["digits/"+cat], want)
		}
	}
	if m.Extra["embedder"] != "onnx:"+filepath.Base(dir) || m.Extra["dim"] != float64(16) {
		t.Errorf("got embedder %v dim %v", m.Extra["embedder"], m.Extra["dim"])
	}
}

func TestRunIdeasBoth(t *testing.T) {
	root, st, _ := writeTestTasks(t)
	srv := fakeAPI(t, "")
	cfg := llmIdeasConfig(root, srv.URL)
	cfg.Source, cfg.Only = IdeasFromBoth, []string{"digits"}
	if err := runIdeas(context.Background(), cfg, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	rows, _ := readIdeas(t, st)
	count := map[string]int{}
	for _, r := range rows {
		count[r.Category+" "+r.Source]++
	}
	for _, cat := range schemas.Categories {
		if got, want := count[cat+" catalog"], len(ideagen.Catalog(ideaTestTasks[0], cat)); got != want {
			t.Errorf("category %s: got %d catalog ideas want %d", cat, got, want)
		}
		if got := count[cat+" llm:gen-1"]; got != 11 {
			t.Errorf("category %s: got %d LLM ideas want 11", cat, got)
		}
	}
}

// TestIdeasConfigValidate pins the message for every field ingest ideas
// refuses.
func TestIdeasConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*IdeasConfig)
		want string // the whole message; "" for valid
	}{
		{"default", func(*IdeasConfig) {}, ""},
		{"threshold 1 disables", func(c *IdeasConfig) { c.Threshold = 1 }, ""},
		{"source", func(c *IdeasConfig) { c.Source = "web" }, `source "web": want catalog, llm or both`},
		{"llm offline", func(c *IdeasConfig) { c.Source = IdeasFromBoth }, `source "both": needs llm.base_url (an OpenAI-compatible endpoint); use source catalog to work offline`},
		{"only", func(c *IdeasConfig) { c.Only = []string{""} }, `only [""]: item 1 is empty: want task ids`},
		{"data", func(c *IdeasConfig) { c.Data = "" }, `data "": must name the data root (a folder or gs://bucket/prefix)`},
		{"tasks", func(c *IdeasConfig) { c.Tasks = "" }, `tasks "": must name the tasks dataset (name, name/vN or a URI)`},
		{"k", func(c *IdeasConfig) { c.K = -1 }, "k -1: must be at least 1"},
		{"threshold above 1", func(c *IdeasConfig) { c.Threshold = 2 }, "threshold 2: must be in (-1, 1] (a cosine similarity; 1 disables the near-duplicate check)"},
		{"threshold -1", func(c *IdeasConfig) { c.Threshold = -1 }, "threshold -1: must be in (-1, 1] (a cosine similarity; 1 disables the near-duplicate check)"},
		{"workers", func(c *IdeasConfig) { c.Workers = -1 }, "workers -1: must not be negative (0: one per CPU core)"},
		{"gen.n", func(c *IdeasConfig) { c.Gen.N = 0 }, "gen.n 0: must be at least 1"},
		{"gen.min_ideas", func(c *IdeasConfig) { c.Gen.MinIdeas = 101 }, "gen.min_ideas 101: must be in [0, gen.n] (gen.n is 100)"},
		{"gen.max_rounds", func(c *IdeasConfig) { c.Gen.MaxRounds = 0 }, "gen.max_rounds 0: must be at least 1"},
		{"gen.max_idea_chars", func(c *IdeasConfig) { c.Gen.MaxIdeaChars = 0 }, "gen.max_idea_chars 0: must be at least 1"},
		{"gen.max_description_chars", func(c *IdeasConfig) { c.Gen.MaxDescriptionChars = -1 }, "gen.max_description_chars -1: must be at least 1"},
		{"gen.temperature", func(c *IdeasConfig) { c.Gen.Temperature = -1 }, "gen.temperature -1: must be a number >= 0"},
		{"gen.max_tokens", func(c *IdeasConfig) { c.Gen.MaxTokens = 0 }, "gen.max_tokens 0: must be at least 1"},
		{"llm", func(c *IdeasConfig) { c.LLM.MaxRetries = -1 }, "llm.max_retries -1: must not be negative"},
		{"embed", func(c *IdeasConfig) { c.Embed.Kind = "bert" }, `embed.kind "bert": want hashed, openai or onnx`},
		{"embed.llm", func(c *IdeasConfig) { c.Embed.LLM.BaseURL = "x" }, `embed.llm.base_url "x": want an http:// or https:// URL such as http://localhost:8000/v1 (empty: offline)`},
	}
	for _, c := range cases {
		cfg := DefaultIdeasConfig()
		c.edit(&cfg)
		got := ""
		if err := cfg.Validate(); err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s: got %q want %q", c.name, got, c.want)
		}
	}
}
