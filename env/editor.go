package env

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/mlerl/mlerl/internal/catalog"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/textutil"
)

// Editor carries out an Edit Script (AI) instruction: it returns the whole
// new script. An error wrapping [ErrInvalidEdit] means the instruction
// cannot be carried out (the agent's fault: outcome invalid_edit, reward
// -1); any other error is the editor's own failure (outcome editor_error,
// a corner case).
type Editor interface {
	Edit(ctx context.Context, script, instruction string) (newScript string, usage llm.Usage, err error)
}

// ErrInvalidEdit is wrapped by editor errors that are the instruction's fault.
var ErrInvalidEdit = errors.New("invalid edit")

// OfflineEditor carries out the built-in idea catalog's concrete edits: an
// instruction must name a catalog idea (its text, up to case, spacing and
// trailing punctuation, or its id) whose edit applies to the script.
type OfflineEditor struct{}

// Edit implements [Editor].
func (OfflineEditor) Edit(ctx context.Context, script, instruction string) (string, llm.Usage, error) {
	idea, ok := catalog.Lookup(instruction)
	if !ok {
		return "", llm.Usage{}, fmt.Errorf("%w: the offline editor knows only the idea catalog's instructions, and %q is not one of them", ErrInvalidEdit, textutil.Clip(instruction, 80))
	}
	out, err := catalog.Apply(script, idea.Edit)
	if err != nil {
		return "", llm.Usage{}, fmt.Errorf("%w: idea %s does not apply to this script: %v", ErrInvalidEdit, idea.ID, err)
	}
	return out, llm.Usage{}, nil
}

// LLMEditor carries out instructions with a chat-completions model: it
// sends the script and the instruction and takes the new script from the
// answer's last ```python code block (or its only code block).
type LLMEditor struct {
	Client *llm.Client
	// MaxTokens bounds the answer (0: the endpoint's default).
	MaxTokens int
}

const editorSystemPrompt = `You are a careful machine-learning engineer who edits Python training scripts.
You receive a script and an edit instruction. Carry out the instruction exactly, change nothing else, keep the script runnable, and keep its section comments (lines like "# === data ===").
Answer with the complete edited script in a single Python code block (` + "```python ... ```" + `) and nothing else.`

// Edit implements [Editor].
func (e LLMEditor) Edit(ctx context.Context, script, instruction string) (string, llm.Usage, error) {
	if e.Client == nil {
		return "", llm.Usage{}, errors.New("llm editor: no client configured")
	}
	zero := 0.0
	req := llm.ChatRequest{
		Messages: []llm.Message{
			{Role: "system", Content: editorSystemPrompt},
			{Role: "user", Content: "Script:\n```python\n" + script + "```\n\nEdit instruction: " + instruction + "\n\nReturn the complete edited script."},
		},
		Temperature: &zero,
		MaxTokens:   e.MaxTokens,
	}
	resp, err := e.Client.Chat(ctx, req)
	if err != nil {
		return "", llm.Usage{}, fmt.Errorf("llm editor: %w", err)
	}
	code, ok := extractCode(resp.Content)
	if !ok {
		return "", resp.Usage, fmt.Errorf("llm editor: the answer has no code block (finish reason %q): %q", resp.FinishReason, textutil.Clip(resp.Content, 120))
	}
	return code, resp.Usage, nil
}

// extractCode returns the last ```python block of an answer, or the last
// block of any language when there is no python one. Its content ends with
// a newline.
func extractCode(answer string) (string, bool) {
	var blocks, python []string
	rest := answer
	for {
		i := strings.Index(rest, "```")
		if i < 0 {
			break
		}
		after := rest[i+3:]
		nl := strings.IndexByte(after, '\n')
		if nl < 0 {
			break
		}
		lang := strings.ToLower(strings.TrimSpace(after[:nl]))
		body := after[nl+1:]
		j := strings.Index(body, "```")
		if j < 0 {
			break // an unterminated block (the answer was cut): no script
		}
		code := body[:j]
		if !strings.HasSuffix(code, "\n") {
			code += "\n"
		}
		blocks = append(blocks, code)
		if lang == "python" || lang == "py" || lang == "python3" {
			python = append(python, code)
		}
		rest = body[j+3:]
	}
	switch {
	case len(python) > 0:
		return python[len(python)-1], true
	case len(blocks) > 0:
		return blocks[len(blocks)-1], true
	}
	return "", false
}
