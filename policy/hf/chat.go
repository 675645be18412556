package hf

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/mlerl/mlerl/internal/tokenizer"
)

// Message is one turn of a conversation (role system, user or assistant).
type Message = tokenizer.Message

// Chat format kinds.
const (
	ChatML      = "chatml"       // Qwen2.5, SmolLM2: <|im_start|>role\n...<|im_end|>\n
	ChatMLQwen3 = "chatml-qwen3" // Qwen3: ChatML with <think> blocks on the last turn
	Llama3      = "llama3"       // Llama 3 / 3.1: <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
)

// ChatFormat renders conversations as a checkpoint's chat template does.
//
// mlerl does not run Jinja. It recognises a template by structural
// markers: the exact expression that renders each message, which is what
// decides the text around the contents (ChatML's
// `'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'`,
// Llama 3's `'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>'`),
// then reads the few things templates of a family vary in: ChatML's
// default system prompt (the literal the template writes when the first
// message is not a system one), whether Qwen3's <think> handling is there,
// Llama 3.1's "Cutting Knowledge Date" system header and its date. Exact
// matching of whole templates was the alternative; it breaks on every
// re-save that changes a space or a tool-calling branch (the same Qwen2.5
// template circulates with `{"name"` and `{{"name"`), while those branches
// never fire for the system/user/assistant messages mlerl renders. The
// renderings are checked against apply_chat_template on
// testdata/chat/*.json. Anything else is refused, naming the file.
type ChatFormat struct {
	Kind string
	// Source is the file the template came from.
	Source string
	// DefaultSystem is written as the system message when the first
	// message is not one (ChatML; "" for none).
	DefaultSystem string
	// BOS is the text the template starts with (Llama 3's bos_token).
	BOS string
	// DateHeader: Llama 3.1's system header ("Cutting Knowledge Date:
	// December 2023\nToday Date: <Date>\n\n") precedes the system text,
	// and a system block is written even without a system message.
	DateHeader bool
	// Date is the header's date ("26 Jul 2024" in Llama 3.1's template);
	// empty with DateToday, where the template calls strftime_now.
	Date      string
	DateToday bool
	// EndOfTurn is the token that closes a turn: <|im_end|> or <|eot_id|>.
	EndOfTurn string
	// Template is the Jinja source as read (written into exported files).
	Template string
}

var (
	// A newline inside a template's string literal is either Jinja's
	// escape (\n) or a real newline, depending on how the file was written.
	chatmlMarker = regexp.MustCompile(`'<\|im_start\|>' \+ message(?:\['role'\]|\.role) \+ '(?:\\n|\n)' \+ (?:message(?:\['content'\]|\.content)|content) \+ '<\|im_end\|>' \+ '(?:\\n|\n)'`)
	llamaMarker  = regexp.MustCompile(`'<\|start_header_id\|>' \+ message\['role'\] \+ '<\|end_header_id\|>(?:\\n|\n)(?:\\n|\n)' ?\+ ?message\['content'\] \| trim \+ '<\|eot_id\|>'`)
	// ChatML's default system prompt: a literal '<|im_start|>system\n...<|im_end|>\n'
	// (the \n either escaped in the Jinja string or a real newline).
	chatmlDefault = regexp.MustCompile(`'<\|im_start\|>system(?:\\n|\n)((?:[^'\\]|\\.)*?)<\|im_end\|>(?:\\n|\n)'`)
	llamaDate     = regexp.MustCompile(`set date_string = "([^"]+)"`)
)

// DetectChat reads the chat template of a checkpoint folder: from
// chat_template.jinja when there (transformers 5 writes it there), else
// tokenizer_config.json's chat_template (a string, or a list whose
// "default" entry is used). bos and eos are tokenizer_config.json's
// bos_token and eos_token.
func DetectChat(dir string) (*ChatFormat, error) {
	return (&Checkpoint{Dir: dir}).detectChat()
}

func (c *Checkpoint) detectChat() (*ChatFormat, error) {
	src := c.where("chat_template.jinja")
	tmpl, err := c.file("chat_template.jinja")
	cfgPath := c.where("tokenizer_config.json")
	cfg, cerr := c.tokenizerConfig()
	if cerr != nil && !errors.Is(cerr, os.ErrNotExist) {
		return nil, cerr
	}
	if errors.Is(err, os.ErrNotExist) {
		if cerr != nil {
			return nil, fmt.Errorf("%s is missing and there is no chat_template.jinja: copy the model's tokenizer_config.json (it holds the chat template) into %s", cfgPath, c.Dir)
		}
		src = cfgPath
		tmpl = []byte(cfg.ChatTemplate)
		if cfg.ChatTemplate == "" {
			return nil, fmt.Errorf("%s has no chat_template (and there is no chat_template.jinja): mlerl prompts the policy in its chat format; use an instruct checkpoint or add its template", cfgPath)
		}
	} else if err != nil {
		return nil, err
	}
	return ParseChatTemplate(src, string(tmpl), cfg.BOSToken)
}

// tokenizerConfig is what mlerl reads of tokenizer_config.json.
type tokenizerConfig struct {
	ChatTemplate string
	BOSToken     string
	EOSToken     string
}

// tokenizerConfig reads the checkpoint's tokenizer_config.json.
func (c *Checkpoint) tokenizerConfig() (tokenizerConfig, error) {
	var tc tokenizerConfig
	path := c.where("tokenizer_config.json")
	b, err := c.file("tokenizer_config.json")
	if err != nil {
		return tc, err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return tc, fmt.Errorf("%s: %w", path, err)
	}
	// bos_token / eos_token: a string, an AddedToken object or null.
	tok := func(k string) (string, error) {
		v, ok := raw[k]
		if !ok || zeroJSON(v) {
			return "", nil
		}
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s, nil
		}
		var o struct{ Content string }
		if err := json.Unmarshal(v, &o); err != nil || o.Content == "" {
			return "", fmt.Errorf("%s: field %q is %s: want a token string", path, k, short(v))
		}
		return o.Content, nil
	}
	if tc.BOSToken, err = tok("bos_token"); err != nil {
		return tc, err
	}
	if tc.EOSToken, err = tok("eos_token"); err != nil {
		return tc, err
	}
	if v, ok := raw["chat_template"]; ok && !zeroJSON(v) {
		if json.Unmarshal(v, &tc.ChatTemplate) != nil {
			var named []struct{ Name, Template string }
			if err := json.Unmarshal(v, &named); err != nil {
				return tc, fmt.Errorf("%s: field \"chat_template\": want a string or a list of {name, template}", path)
			}
			for _, n := range named {
				if n.Name == "default" {
					tc.ChatTemplate = n.Template
				}
			}
			if tc.ChatTemplate == "" {
				return tc, fmt.Errorf("%s: field \"chat_template\" is a list without a \"default\" entry", path)
			}
		}
	}
	return tc, nil
}

// ParseChatTemplate recognises a chat template's source (src names the
// file in errors); bos is the tokenizer's bos_token text.
func ParseChatTemplate(src, tmpl, bos string) (*ChatFormat, error) {
	f, err := parseChatTemplate(src, tmpl, bos)
	if f != nil {
		f.Template = tmpl
	}
	return f, err
}

func parseChatTemplate(src, tmpl, bos string) (*ChatFormat, error) {
	switch {
	case chatmlMarker.MatchString(tmpl):
		f := &ChatFormat{Kind: ChatML, Source: src, EndOfTurn: "<|im_end|>"}
		if strings.Contains(tmpl, "<think>") {
			f.Kind = ChatMLQwen3
			if !strings.Contains(tmpl, "last_query_index") {
				return nil, fmt.Errorf("%s: chat template is ChatML with <think> but not Qwen3's (no last_query_index): mlerl does not know how it places reasoning", src)
			}
			return f, nil
		}
		if m := chatmlDefault.FindStringSubmatch(tmpl); m != nil {
			f.DefaultSystem = jinjaUnescape(m[1])
		}
		return f, nil
	case llamaMarker.MatchString(tmpl):
		f := &ChatFormat{Kind: Llama3, Source: src, EndOfTurn: "<|eot_id|>", BOS: bos}
		if !strings.Contains(tmpl, "bos_token") {
			f.BOS = ""
		}
		if strings.Contains(tmpl, "Cutting Knowledge Date: December 2023") {
			f.DateHeader = true
			if strings.Contains(tmpl, "strftime_now") {
				f.DateToday = true
			} else if m := llamaDate.FindStringSubmatch(tmpl); m != nil {
				f.Date = m[1]
			} else {
				return nil, fmt.Errorf("%s: Llama 3.1 chat template without a date_string: mlerl cannot tell the system header's date", src)
			}
		}
		return f, nil
	}
	return nil, fmt.Errorf("%s: the chat template is not one mlerl renders (it knows ChatML as Qwen2.5 and SmolLM2 write it, Qwen3's ChatML with <think>, and Llama 3 / 3.1's); use one of those checkpoints or add the format to policy/hf/chat.go", src)
}

// jinjaUnescape undoes a Jinja string literal's escapes (\n, \t, \', \\).
func jinjaUnescape(s string) string {
	r := strings.NewReplacer(`\n`, "\n", `\t`, "\t", `\'`, "'", `\"`, `"`, `\\`, `\`)
	return r.Replace(s)
}

// Part is a piece of a rendered conversation: a control token the
// template writes (Special) or text (template literals and contents).
type Part struct {
	Text    string
	Special bool
}

// Render returns the conversation as apply_chat_template(messages,
// tokenize=False, add_generation_prompt=gen) writes it.
func (f *ChatFormat) Render(msgs []Message, gen bool) (string, error) {
	parts, err := f.Parts(msgs, gen)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// Parts is Render split into control tokens and text, for encoding the
// contents as ordinary text (see [Checkpoint.EncodeChat]).
func (f *ChatFormat) Parts(msgs []Message, gen bool) ([]Part, error) {
	if len(msgs) == 0 {
		return nil, fmt.Errorf("render chat: no messages")
	}
	for i, m := range msgs {
		switch m.Role {
		case "system", "user", "assistant":
		default:
			return nil, fmt.Errorf("render chat: message %d has role %q: want system, user or assistant", i, m.Role)
		}
	}
	var p parts
	switch f.Kind {
	case ChatML:
		if msgs[0].Role != "system" && f.DefaultSystem != "" {
			p.chatml("system", f.DefaultSystem)
		}
		for _, m := range msgs {
			p.chatml(m.Role, m.Content)
		}
		if gen {
			p.special("<|im_start|>")
			p.text("assistant\n")
		}
	case ChatMLQwen3:
		f.qwen3(&p, msgs, gen)
	case Llama3:
		if f.BOS != "" {
			p.special(f.BOS)
		}
		rest := msgs
		if f.DateHeader {
			system := ""
			if msgs[0].Role == "system" {
				system, rest = pyStrip(msgs[0].Content), msgs[1:]
			}
			date := f.Date
			if f.DateToday {
				date = time.Now().Format("02 Jan 2006")
			}
			p.llama("system", "Cutting Knowledge Date: December 2023\nToday Date: "+date+"\n\n"+system)
		}
		for _, m := range rest {
			p.llama(m.Role, pyStrip(m.Content))
		}
		if gen {
			p.special("<|start_header_id|>")
			p.text("assistant")
			p.special("<|end_header_id|>")
			p.text("\n\n")
		}
	default:
		return nil, fmt.Errorf("render chat: unknown format kind %q", f.Kind)
	}
	return p.list, nil
}

// qwen3 follows Qwen3's template for plain messages: assistant turns
// before the last user query lose their <think> block; those after it keep
// theirs (re-wrapped), and the last one always gets one.
func (f *ChatFormat) qwen3(p *parts, msgs []Message, gen bool) {
	last := len(msgs) - 1
	for i := len(msgs) - 1; i >= 0; i-- {
		c := msgs[i].Content
		if msgs[i].Role == "user" && !(strings.HasPrefix(c, "<tool_response>") && strings.HasSuffix(c, "</tool_response>")) {
			last = i
			break
		}
	}
	for i, m := range msgs {
		if m.Role != "assistant" {
			p.chatml(m.Role, m.Content)
			continue
		}
		content, reasoning := m.Content, ""
		if j := strings.Index(content, "</think>"); j >= 0 {
			before := content[:j]
			if k := strings.LastIndex(before, "<think>"); k >= 0 {
				before = before[k+len("<think>"):]
			}
			reasoning = strings.TrimLeft(strings.TrimRight(before, "\n"), "\n")
			content = strings.TrimLeft(content[strings.LastIndex(content, "</think>")+len("</think>"):], "\n")
		}
		p.special("<|im_start|>")
		if i > last && (i == len(msgs)-1 || reasoning != "") {
			p.text("assistant\n")
			p.special("<think>")
			p.text("\n" + strings.Trim(reasoning, "\n") + "\n")
			p.special("</think>")
			p.text("\n\n" + strings.TrimLeft(content, "\n"))
		} else {
			p.text("assistant\n" + content)
		}
		p.special("<|im_end|>")
		p.text("\n")
	}
	if gen {
		p.special("<|im_start|>")
		p.text("assistant\n")
	}
}

type parts struct{ list []Part }

func (p *parts) special(s string) { p.list = append(p.list, Part{Text: s, Special: true}) }

func (p *parts) text(s string) {
	if n := len(p.list); n > 0 && !p.list[n-1].Special {
		p.list[n-1].Text += s // one stretch, tokenised as a whole as HF does
		return
	}
	p.list = append(p.list, Part{Text: s})
}

func (p *parts) chatml(role, content string) {
	p.special("<|im_start|>")
	p.text(role + "\n" + content)
	p.special("<|im_end|>")
	p.text("\n")
}

func (p *parts) llama(role, content string) {
	p.special("<|start_header_id|>")
	p.text(role)
	p.special("<|end_header_id|>")
	p.text("\n\n" + content)
	p.special("<|eot_id|>")
}

// pyStrip is Python's str.strip(), which Jinja's trim filter calls: it
// removes Unicode white space and the separators U+001C..U+001F.
func pyStrip(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
	})
}
