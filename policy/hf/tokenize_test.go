package hf

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/internal/deps"
	"github.com/mlerl/mlerl/internal/tokenizer"
)

type corpusRow struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

type idsRow struct {
	Name   string `json:"name"`
	N      int    `json:"n"`
	SHA256 string `json:"sha256"`
	IDs    []int  `json:"ids"`
}

func readJSONL[T any](t testing.TB, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v (regenerate with `.deps/pyref/bin/python scripts/hf_reference.py`)", err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for line := 1; sc.Scan(); line++ {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s line %d: %v", path, line, err)
		}
		out = append(out, v)
	}
	return out
}

func idsDigest(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(id)
	}
	sum := sha256.Sum256([]byte(strings.Join(s, ",")))
	return hex.EncodeToString(sum[:])
}

// TestTokenizersMatchHF encodes the corpus (the suite's task descriptions
// and scripts, policy prompts, Unicode edge cases, the Qwen golden
// strings) with five tokenizer.json files and compares with Hugging Face
// tokenizers' ids: the tiny Qwen-, Llama-3- and GPT-2/SmolLM2-style
// (Digits, then ByteLevel's own regex) ones committed in testdata/tok,
// and the real Qwen3 and Llama 3.1 files that `make setup`
// installs (checked by sha256 against those the references were made from).
func TestTokenizersMatchHF(t *testing.T) {
	corpus := readJSONL[corpusRow](t, "testdata/tokenize/corpus.jsonl")
	if len(corpus) < 500 {
		t.Fatalf("corpus has %d texts, want the suite's files, prompts, edge cases and golden strings", len(corpus))
	}
	var meta struct {
		Files map[string]struct{ Path, SHA256 string }
	}
	readJSON(t, "testdata/tokenize/meta.json", &meta)
	for _, key := range []string{"tiny-qwen", "tiny-llama3", "tiny-gpt2", "qwen3", "llama3_1"} {
		t.Run(key, func(t *testing.T) {
			file := meta.Files[key]
			path := filepath.Join("testdata", file.Path)
			if file.SHA256 != "" {
				p, err := deps.Find(file.Path)
				if err != nil {
					t.Fatalf("%s is not installed: run `make setup` (it installs %s): %v", file.Path, file.Path, err)
				}
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != file.SHA256 {
					t.Fatalf("%s has another sha256 than the file the references were made from: rerun `make setup`", p)
				}
				path = p
			}
			tok, err := tokenizer.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			want := readJSONL[idsRow](t, "testdata/tokenize/"+key+".jsonl")
			if len(want) != len(corpus) {
				t.Fatalf("%d reference rows for %d corpus texts", len(want), len(corpus))
			}
			bad := 0
			for i, c := range corpus {
				w := want[i]
				if w.Name != c.Name {
					t.Fatalf("row %d is %q, corpus has %q", i, w.Name, c.Name)
				}
				got := tok.Encode(c.Text)
				if len(got) == w.N && idsDigest(got) == w.SHA256 {
					continue
				}
				bad++
				if bad <= 5 {
					at := 0
					for w.IDs != nil && at < min(len(got), len(w.IDs)) && got[at] == w.IDs[at] {
						at++
					}
					t.Errorf("%s: %d ids, want %d (first difference at %d; got %v, want %v)", c.Name, len(got), w.N, at, head(got, at), head(w.IDs, at))
				}
			}
			t.Logf("%s: %d/%d texts give Hugging Face's ids", key, len(corpus)-bad, len(corpus))
		})
	}
}

// head is ids around index at, for error messages.
func head(ids []int, at int) []int {
	lo := max(0, at-2)
	return ids[lo:min(len(ids), at+6)]
}

// chatRef is testdata/chat/NAME.json.
type chatRef struct {
	Template string               `json:"template"`
	BOS      *string              `json:"bos_token"`
	Messages map[string][]Message `json:"messages"`
	Cases    []struct {
		Conversation string `json:"conversation"`
		Gen          bool   `json:"add_generation_prompt"`
		Text         string `json:"text"`
	} `json:"cases"`
}

// TestChatMatchesApplyChatTemplate renders each reference conversation
// (system+user, user only, multi-turn with whitespace to trim, special
// text in content, Unicode, a <think> history) with and without the
// generation prompt under six templates and compares with transformers'
// apply_chat_template.
func TestChatMatchesApplyChatTemplate(t *testing.T) {
	for _, name := range []string{"qwen2.5-instruct", "qwen2.5-base", "smollm2", "llama3", "llama3.1", "qwen3"} {
		t.Run(name, func(t *testing.T) {
			var ref chatRef
			readJSON(t, "testdata/chat/"+name+".json", &ref)
			bos := ""
			if ref.BOS != nil {
				bos = *ref.BOS
			}
			f, err := ParseChatTemplate(name, ref.Template, bos)
			if err != nil {
				t.Fatal(err)
			}
			if len(ref.Cases) < 10 {
				t.Fatalf("%d cases, want the reference's 14", len(ref.Cases))
			}
			for _, c := range ref.Cases {
				got, err := f.Render(ref.Messages[c.Conversation], c.Gen)
				if err != nil {
					t.Fatal(err)
				}
				if got != c.Text {
					t.Errorf("%s (generation prompt %v):\n got  %q\n want %q", c.Conversation, c.Gen, got, c.Text)
				}
			}
		})
	}
}

func TestChatFormatsDetected(t *testing.T) {
	tests := []struct {
		dir, kind, system, date string
		stops                   []string
	}{
		{"llama", ChatML, "You are a helpful AI assistant named SmolLM, trained by Hugging Face", "", []string{"<|im_end|>"}},
		{"llama3", Llama3, "", "26 Jul 2024", []string{"<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"}},
		{"qwen2", ChatML, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", "", []string{"<|endoftext|>", "<|im_end|>"}},
		{"qwen3", ChatML, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", "", []string{"<|endoftext|>", "<|im_end|>"}},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			c := loadCkpt(t, "testdata/ckpt/"+tt.dir)
			f := c.Chat
			if f.Kind != tt.kind || f.DefaultSystem != tt.system || f.Date != tt.date {
				t.Errorf("format got %s %q %q, want %s %q %q", f.Kind, f.DefaultSystem, f.Date, tt.kind, tt.system, tt.date)
			}
			if tt.dir == "qwen3" && !strings.HasSuffix(f.Source, "chat_template.jinja") {
				t.Errorf("qwen3's template read from %s, want chat_template.jinja", f.Source)
			}
			var want []int
			for _, s := range tt.stops {
				id, _ := c.Tokenizer.ID(s)
				want = append(want, id)
			}
			slices.Sort(want)
			if got := c.StopIDs(); !slices.Equal(got, want) {
				t.Errorf("StopIDs got %v, want %v (%v)", got, want, tt.stops)
			}
		})
	}
}

// TestEncodeChat: the ids of a rendered conversation equal the tokenizer's
// on the rendered text, except that control-token text inside a message
// stays ordinary.
func TestEncodeChat(t *testing.T) {
	for _, dir := range []string{"llama", "llama3", "qwen2"} {
		c := loadCkpt(t, "testdata/ckpt/"+dir)
		msgs := []Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "  Which action?\n"}, {Role: "assistant", Content: "Action: Execute Script"}}
		text, _ := c.Chat.Render(msgs, true)
		got, err := c.EncodeChat(msgs, true)
		if err != nil {
			t.Fatal(err)
		}
		if want := c.Tokenizer.Encode(text); !slices.Equal(got, want) {
			t.Errorf("%s: EncodeChat got %v, want Encode(Render) %v", dir, got, want)
		}
		end, _ := c.Tokenizer.ID(c.Chat.EndOfTurn)
		quoted := []Message{{Role: "user", Content: "say " + c.Chat.EndOfTurn + " now"}}
		ids, _ := c.EncodeChat(quoted, false)
		n := 0
		for _, id := range ids {
			if id == end {
				n++
			}
		}
		// One per turn the template closes (a default system turn included).
		parts, _ := c.Chat.Parts(quoted, false)
		turns := 0
		for _, p := range parts {
			if p.Special && p.Text == c.Chat.EndOfTurn {
				turns++
			}
		}
		if n != turns || turns == 0 {
			t.Errorf("%s: %d end-of-turn ids for %d turns, one quoting the token: want one per turn", dir, n, turns)
		}
	}
}

func TestChatRefusals(t *testing.T) {
	tests := []struct{ name, tmpl, want string }{
		{"gemma", "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}", "tokenizer_config.json: the chat template is not one mlerl renders"},
		{"empty", "", "not one mlerl renders"},
		{"think without qwen3", "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}<think>", "not Qwen3's"},
	}
	for _, tt := range tests {
		if _, err := ParseChatTemplate("tokenizer_config.json", tt.tmpl, ""); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
	f, _ := ParseChatTemplate("x", "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}", "")
	if _, err := f.Render([]Message{{Role: "tool", Content: "x"}}, false); err == nil {
		t.Error("role tool: got no error")
	}
	if _, err := f.Render(nil, true); err == nil {
		t.Error("no messages: got no error")
	}
}

// TestChatDateToday: Llama 3.2's template takes the date from
// strftime_now, which transformers binds to today's date ("%d %b %Y").
func TestChatDateToday(t *testing.T) {
	tmpl := `{{- bos_token }}{%- if not date_string is defined %}{%- if strftime_now is defined %}{%- set date_string = strftime_now("%d %b %Y") %}{%- else %}{%- set date_string = "26 Jul 2024" %}{%- endif %}{%- endif %}` +
		`{{- "Cutting Knowledge Date: December 2023\n" }}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}`
	f, err := ParseChatTemplate("chat_template.jinja", tmpl, "<|begin_of_text|>")
	if err != nil {
		t.Fatal(err)
	}
	if !f.DateToday {
		t.Fatalf("DateToday got false, want true for a template calling strftime_now")
	}
	got, _ := f.Render([]Message{{Role: "user", Content: "hi"}}, false)
	today := time.Now().Format("02 Jan 2006")
	if !strings.Contains(got, "Today Date: "+today+"\n\n") && !strings.Contains(got, "Today Date: "+time.Now().Add(-time.Minute).Format("02 Jan 2006")) {
		t.Errorf("rendered %q, want today's date %s", got, today)
	}
}
