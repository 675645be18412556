package env

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/catalog"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/schemas"
)

const sectioned = `# === imports ===
import csv
# === end imports ===
# === data ===
X_train = [1.0]
# === end data ===
# === model ===
threshold = 0.0
# === end model ===
`

func TestOfflineEditor(t *testing.T) {
	idea := catalog.All()[0]
	tests := []struct {
		name        string
		script, ins string
		invalid     bool
	}{
		{"catalog idea by text", sectioned, idea.Text, false},
		{"catalog idea, other case and final period", sectioned, strings.ToUpper(idea.Text) + ".", false},
		{"catalog idea by id", sectioned, idea.ID, false},
		{"not in the catalog", sectioned, "make it better", true},
		{"idea does not apply (no data section)", "print(1)\n", idea.Text, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := OfflineEditor{}.Edit(context.Background(), tc.script, tc.ins)
			if tc.invalid {
				if !errors.Is(err, ErrInvalidEdit) {
					t.Fatalf("got error %v, want one wrapping ErrInvalidEdit", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want, _ := catalog.Apply(tc.script, idea.Edit)
			if got != want || got == tc.script {
				t.Fatalf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// chatServer answers chat completions with answer and records the last request.
func chatServer(t *testing.T, answer string, status int) (*httptest.Server, *map[string]any) {
	var last map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&last); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if status != http.StatusOK {
			http.Error(w, `{"error": {"message": "bad request"}}`, status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"id": "x", "object": "chat.completion",
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": answer}}},
			"usage":   map[string]any{"prompt_tokens": 120, "completion_tokens": 45, "total_tokens": 165},
		})
	}))
	t.Cleanup(srv.Close)
	return srv, &last
}

func TestLLMEditor(t *testing.T) {
	newScript := strings.Replace(sectioned, "threshold = 0.0", "threshold = 0.5", 1)
	tests := []struct {
		name    string
		answer  string
		status  int
		want    string
		wantErr bool
	}{
		{"python block", "Here you go:\n```python\n" + newScript + "```\nDone.", 200, newScript, false},
		{"last python block wins", "```python\nold\n```\nbetter:\n```python\n" + newScript + "```", 200, newScript, false},
		{"untagged block", "```\n" + newScript + "```", 200, newScript, false},
		{"no block", "I changed the threshold.", 200, "", true},
		{"cut-off block", "```python\n" + newScript, 200, "", true},
		{"http 400", "", 400, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, last := chatServer(t, tc.answer, tc.status)
			c, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "editor", MaxRetries: 0})
			if err != nil {
				t.Fatal(err)
			}
			got, usage, err := LLMEditor{Client: c}.Edit(context.Background(), sectioned, "raise the threshold to 0.5")
			if tc.wantErr {
				if err == nil || errors.Is(err, ErrInvalidEdit) {
					t.Fatalf("got %q, %v; want an editor error (not an invalid edit)", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
			if usage.PromptTokens != 120 || usage.CompletionTokens != 45 {
				t.Errorf("got usage %+v, want 120 prompt and 45 completion tokens", usage)
			}
			msgs, _ := (*last)["messages"].([]any)
			if len(msgs) != 2 || (*last)["model"] != "editor" {
				t.Fatalf("request: got %v", *last)
			}
			user, _ := msgs[1].(map[string]any)["content"].(string)
			if !strings.Contains(user, sectioned) || !strings.Contains(user, "raise the threshold to 0.5") {
				t.Errorf("the prompt lacks the script or the instruction: %q", user)
			}
		})
	}
}

// TestOriginalNeedsAnotherEditor: a task whose train.py is the benchmark's
// own (initial: original) is refused, in one line saying what to do, when
// the editor is the offline one (the default, or named), fresh or
// restored; any other editor takes it. An llm editor the stage did not
// supply is refused too.
func TestOriginalNeedsAnotherEditor(t *testing.T) {
	ctx := context.Background()
	st := newLocalStore(t)
	spec := fixture(t, st, false)
	spec.Initial = schemas.InitialOriginal
	want := "task " + spec.TaskID + ": its train.py is the benchmark's own (task.yaml initial: original), without the sections the offline editor's catalog edits need: run with --env.editor llm and an llm endpoint (--llm.base_url), or re-import the task with --initial generated"
	for name, editor := range map[string]Editor{"default": nil, "offline": OfflineEditor{}} {
		cfg := testConfig(t)
		cfg.Editor = editor
		if _, err := New(ctx, cfg, spec, st); err == nil || err.Error() != want {
			t.Errorf("%s editor: got %v\nwant %s", name, err, want)
		}
	}
	cfg := testConfig(t) // its editor is a stand-in for an LLM
	e, err := New(ctx, cfg, spec, st)
	if err != nil {
		t.Fatalf("another editor: %v", err)
	}
	ref, err := e.Snapshot(ctx)
	e.Close()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Editor = nil
	if _, err := Restore(ctx, cfg, st, ref); err == nil || err.Error() != want {
		t.Errorf("restored with the default editor: got %v\nwant %s", err, want)
	}
	cfg.EditorKind = EditorLLM
	if _, err := New(ctx, cfg, spec, st); err == nil || !strings.Contains(err.Error(), `env.editor "llm": this stage gives the environment no LLM client`) {
		t.Errorf("editor llm without a client: got %v", err)
	}
	cfg.EditorKind = "gpt"
	if err := cfg.Validate(); err == nil || err.Error() != `editor "gpt": want offline or llm` {
		t.Errorf("unknown editor: got %v", err)
	}
}
