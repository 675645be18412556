package dataset

// Exports for trainers other teams already use:
//
//   - SFT examples as ShareGPT JSON Lines, the layout LLaMA-Factory reads
//     with "formatting": "sharegpt" (WriteShareGPT; WriteDatasetInfo writes
//     the dataset_info.json entries that register the files), in two
//     files: sharegpt_policy.jsonl with the prompt mlerl gives a Hugging
//     Face policy (system: policy.SystemPrompt, human: the compact
//     prompt), so that a model LLaMA-Factory trains on it is evaluated by
//     mlerl on the prompt it learned; and sharegpt.jsonl with the full
//     prompt (system: the role, the tool list and the answer format;
//     human: the state) and the tools as JSON. In both the gpt turn is
//     the expert's answer;
//   - RL states as verl's RL Parquet layout (WriteVerl), one file of
//     held-in states for training and one of held-out states for
//     validation: data_source, prompt (chat messages), ability,
//     reward_model{style, ground_truth}, extra_info{state_id, task_id,
//     split, index, ...}.
//
// Both carry the prompt as chat messages in one of three forms
// ([PromptForm]): the policy's (policy.PromptMessages: mlerl's system
// message and the compact prompt as the user turn), the compact prompt
// alone as one user message, or the full MLAgentBench-style prompt split
// into a system message (its fixed parts) and a user message (the
// state). A
// [ChatCounter] counts them as a model's chat template renders them: the
// prompt with the generation prompt (what verl's max_prompt_length filter
// measures) and, for the ShareGPT file, the whole conversation (what
// LLaMA-Factory's cutoff_len truncates). [QwenChat] counts as Qwen3's
// template does, [CheckpointChat] as a Hugging Face checkpoint's own
// tokenizer and template do: the counts only mean something for the
// model being trained (`mlerl dataset --export_tokenizer DIR`).
//
// Writers take an io.Writer, so the same code writes a local file, a
// buffer or an object-store upload. Rows of held-out tasks are refused by
// the training exports, and rows of held-in tasks by the validation file:
// an export meant for training must never carry an evaluation task.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/parquet-go/parquet-go"

	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/internal/tokenizer"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/policy/hf"
	"github.com/mlerl/mlerl/schemas"
)

// ErrHeldOut is wrapped by errors about a held-out task's row given to an
// export that does not allow them.
var ErrHeldOut = errors.New("held-out task in a training export")

// ErrHeldIn is wrapped by errors about a held-in task's row given to the
// validation file: validating on training tasks measures nothing.
var ErrHeldIn = errors.New("held-in task in a validation export")

// RowError locates a bad input row of an export.
type RowError struct {
	Export string // "sharegpt" or "verl"
	Row    int    // 0-based position among the rows written
	ID     string // the row's example_id or state_id
	Field  string // the offending column
	Err    error
}

func (e *RowError) Error() string {
	return fmt.Sprintf("%s export: row %d (%q): %s: %v", e.Export, e.Row, e.ID, e.Field, e.Err)
}

func (e *RowError) Unwrap() error { return e.Err }

// errEmpty is wrapped when a required text column is empty.
var errEmpty = errors.New("empty; re-run `mlerl dataset` so the prompt renderer fills it")

// PromptForm selects the rendering of a state an export carries.
type PromptForm string

const (
	// PromptPolicy is the prompt mlerl gives a Hugging Face policy
	// (policy.PromptMessages): a system message, policy.SystemPrompt, and
	// the compact prompt as the user turn. A trainer's chat template
	// renders it as the policy's own (the same template) renders it, so a
	// model trained on it elsewhere is evaluated and fine-tuned in mlerl
	// on the tokens it learned from (Qwen3: with enable_thinking false,
	// whose empty think block mlerl's prompt ends with too).
	PromptPolicy PromptForm = "policy"
	// PromptCompact is the compact prompt alone, in one user message (a
	// chat template adds its own default system message, if it has one).
	PromptCompact PromptForm = "compact"
	// PromptFull is the full MLAgentBench-style prompt split in two: a
	// system message with its fixed parts (the role and tool list it
	// starts with, the answer format it ends with) and a user message with
	// the state (research problem, scores, plan, history).
	PromptFull PromptForm = "full"
)

// ParsePromptForm checks a prompt form's name ("" gives def).
func ParsePromptForm(s string, def PromptForm) (PromptForm, error) {
	switch f := PromptForm(s); f {
	case "":
		return def, nil
	case PromptPolicy, PromptCompact, PromptFull:
		return f, nil
	}
	return "", fmt.Errorf("prompt form %q: want %s, %s or %s", s, PromptPolicy, PromptCompact, PromptFull)
}

// Messages returns the chat messages of a state's prompt in form. system,
// when not empty, opens the system message (not with PromptPolicy, whose
// system message is the policy's). A full prompt that is not made of the
// renderer's fixed parts (written by an older renderer) stays whole in
// the user message. field names the column the prompt came from (for
// errors about an empty one).
func Messages(compact, full string, form PromptForm, system string) (msgs []ChatMessage, field string, err error) {
	prompt, field := full, "full_prompt"
	if form == PromptCompact || form == PromptPolicy {
		prompt, field = compact, "prompt"
	}
	if prompt == "" {
		return nil, field, errEmpty
	}
	if form == PromptPolicy {
		if system != "" {
			return nil, "system", fmt.Errorf("the %s prompt form's system message is the policy's (policy.SystemPrompt): give no other", PromptPolicy)
		}
		for _, m := range policy.PromptMessages(policy.SystemPrompt, prompt) {
			msgs = append(msgs, ChatMessage{Role: m.Role, Content: m.Content})
		}
		return msgs, field, nil
	}
	user := prompt
	if form == PromptFull {
		tools, format := agents.FullInstructions()
		if state, ok := strings.CutPrefix(prompt, tools); ok && strings.HasSuffix(state, format) {
			user = strings.Trim(strings.TrimSuffix(state, format), "\n")
			system = strings.TrimSpace(strings.TrimSpace(system) + "\n\n" + strings.TrimRight(tools, "\n") + "\n" + format)
		}
	}
	if system != "" {
		msgs = append(msgs, ChatMessage{Role: "system", Content: system})
	}
	return append(msgs, ChatMessage{Role: "user", Content: user}), field, nil
}

// A ChatCounter counts the tokens of chat messages as a model's chat
// template renders them: with gen, followed by the generation prompt
// (apply_chat_template(msgs, add_generation_prompt=True), the prompt a
// trainer's length filter measures); without, as a whole conversation
// ending with the assistant's answer (what a trainer's cutoff measures).
type ChatCounter func(msgs []ChatMessage, gen bool) (int, error)

// QwenChat counts with count (the Qwen3 tokenizer's, internal/tokenizer)
// the text [ChatText] renders: Qwen3's template for system, user and
// assistant messages, without the <think> block its template puts in
// front of the last answer (4 tokens).
func QwenChat(count func(string) int) ChatCounter {
	return func(msgs []ChatMessage, gen bool) (int, error) {
		m := make([]tokenizer.Message, len(msgs))
		for i, c := range msgs {
			m[i] = tokenizer.Message{Role: c.Role, Content: c.Content}
		}
		return count(tokenizer.FormatChat(m, gen)), nil
	}
}

// CheckpointChat counts with a Hugging Face checkpoint's own tokenizer
// and chat template ([hf.Checkpoint.EncodeChat]): the lengths verl and
// LLaMA-Factory measure when they train that checkpoint, a default
// system prompt its template adds included (Qwen2.5's).
func CheckpointChat(c *hf.Checkpoint) ChatCounter {
	return func(msgs []ChatMessage, gen bool) (int, error) {
		m := make([]hf.Message, len(msgs))
		for i, c := range msgs {
			m[i] = hf.Message{Role: c.Role, Content: c.Content}
		}
		ids, err := c.EncodeChat(m, gen)
		return len(ids), err
	}
}

// ChatTokens counts the tokens of a prompt as a Qwen3 chat template
// renders it before generation: every message in ChatML
// ("<|im_start|>role\ncontent<|im_end|>\n") followed by the generation
// prompt "<|im_start|>assistant\n", encoded with the special tokens
// recognised. With count the Qwen3 tokenizer's (internal/tokenizer), it
// is what verl's data.max_prompt_length filter measures,
// len(tokenizer.apply_chat_template(prompt, add_generation_prompt=True)).
// This is Qwen3's own chat template's output for system and user
// messages without tools (checked against its tokenizer_config.json);
// enable_thinking=False appends "<think>\n\n</think>\n\n", and a
// template that adds a default system prompt to messages without one
// (Qwen2.5's) counts those ~20 tokens more.
func ChatTokens(msgs []ChatMessage, count func(string) int) int {
	return count(ChatText(msgs))
}

// ChatText is the text [ChatTokens] counts.
func ChatText(msgs []ChatMessage) string {
	m := make([]tokenizer.Message, len(msgs))
	for i, c := range msgs {
		m[i] = tokenizer.Message{Role: c.Role, Content: c.Content}
	}
	return tokenizer.FormatChat(m, true)
}

// ShareGPT roles, as LLaMA-Factory's default sharegpt tags name them.
const (
	RoleSystem = "system"
	RoleHuman  = "human"
	RoleGPT    = "gpt"
)

// ShareGPTTurn is one message of a ShareGPT conversation.
type ShareGPTTurn struct {
	From  string `json:"from"`
	Value string `json:"value"`
}

// ShareGPTRecord is one JSON line of the ShareGPT export.
type ShareGPTRecord struct {
	// Conversations is the human turn (the state) and the gpt turn (the
	// expert's answer).
	Conversations []ShareGPTTurn `json:"conversations"`
	// System is the system prompt: with the policy's prompt,
	// policy.SystemPrompt; with the full prompt, its role, tool list and
	// answer format; empty with the compact prompt (unless options give
	// one).
	System string `json:"system"`
	// Tools is the JSON text of the actions as functions ([agents.Tools]:
	// name, description, parameters JSON Schema), for tool-aware training
	// (see [DatasetInfo]). Absent with the policy's prompt, which names
	// its actions itself.
	Tools string `json:"tools,omitempty"`
}

// toolsJSON is the tools column: the same text in every record.
var toolsJSON = sync.OnceValue(func() string {
	b, err := json.Marshal(agents.Tools())
	if err != nil {
		panic(err) // strings and maps of strings
	}
	return string(b)
})

// ShareGPTOptions configure [WriteShareGPT]. Start from
// [DefaultShareGPTOptions].
type ShareGPTOptions struct {
	// Prompt is the prompt form. Default (and when empty) PromptFull,
	// the file registered as mlerl_sft; `mlerl dataset` also writes one
	// with PromptPolicy (mlerl_sft_policy).
	Prompt PromptForm
	// System, when not empty, opens the system prompt. Default none.
	System string
	// AllowHeldOut lets rows of held-out tasks through (an evaluation
	// export). Default false: they are an error wrapping ErrHeldOut.
	AllowHeldOut bool
	// Count, when set, counts each record's prompt (system and human
	// turn, with the generation prompt) and whole conversation (the gpt
	// turn too), for [ShareGPTWriter.PromptTokens] and
	// [ShareGPTWriter.ExampleTokens]. Default nil: not counted.
	Count ChatCounter
}

// DefaultShareGPTOptions returns the options of `mlerl dataset`'s export
// (which sets Count: [QwenChat], or the export_tokenizer's).
func DefaultShareGPTOptions() ShareGPTOptions { return ShareGPTOptions{Prompt: PromptFull} }

// ShareGPTWriter streams SFT examples as ShareGPT JSON Lines.
type ShareGPTWriter struct {
	enc      *json.Encoder
	opts     ShareGPTOptions
	rows     int
	tokens   []int
	examples []int
}

// NewShareGPTWriter returns a writer of JSON lines to w. It buffers
// nothing: each Write reaches w before it returns.
func NewShareGPTWriter(w io.Writer, opts ShareGPTOptions) *ShareGPTWriter {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // keep <, > and & readable in code and prompts
	return &ShareGPTWriter{enc: enc, opts: opts}
}

// Write appends one line per example. On a bad row it returns a
// *RowError and writes nothing for that row or those after it.
func (sw *ShareGPTWriter) Write(rows ...schemas.SFTExample) error {
	for i := range rows {
		rec, err := ShareGPT(rows[i], sw.opts)
		if err != nil {
			var re *RowError
			if errors.As(err, &re) {
				re.Row = sw.rows
			}
			return err
		}
		if sw.opts.Count != nil {
			prompt, err := sw.opts.Count(rec.PromptMessages(), true)
			if err != nil {
				return &RowError{Export: "sharegpt", Row: sw.rows, ID: rows[i].ExampleID, Field: "prompt", Err: fmt.Errorf("count tokens: %w", err)}
			}
			whole, err := sw.opts.Count(append(rec.PromptMessages(), ChatMessage{Role: "assistant", Content: rows[i].Response}), false)
			if err != nil {
				return &RowError{Export: "sharegpt", Row: sw.rows, ID: rows[i].ExampleID, Field: "response", Err: fmt.Errorf("count tokens: %w", err)}
			}
			sw.tokens, sw.examples = append(sw.tokens, prompt), append(sw.examples, whole)
		}
		if err := sw.enc.Encode(rec); err != nil {
			return fmt.Errorf("sharegpt export: write row %d: %w", sw.rows, err)
		}
		sw.rows++
	}
	return nil
}

// Rows returns how many examples were written.
func (sw *ShareGPTWriter) Rows() int { return sw.rows }

// PromptTokens returns the prompt token count of every record written,
// in order (nil without ShareGPTOptions.Count). The caller must not
// modify it.
func (sw *ShareGPTWriter) PromptTokens() []int { return sw.tokens }

// ExampleTokens returns the token count of every record's whole
// conversation (prompt, answer and its end of turn: the sequence a
// supervised trainer trains on and LLaMA-Factory's cutoff_len limits), in
// order (nil without ShareGPTOptions.Count). The caller must not modify
// it.
func (sw *ShareGPTWriter) ExampleTokens() []int { return sw.examples }

// PromptMessages returns the record's prompt as chat messages: the
// system prompt (when not empty) and the human turn, as a chat template
// renders them before the answer.
func (r ShareGPTRecord) PromptMessages() []ChatMessage {
	var msgs []ChatMessage
	if r.System != "" {
		msgs = append(msgs, ChatMessage{Role: "system", Content: r.System})
	}
	for _, t := range r.Conversations {
		if t.From == RoleHuman {
			msgs = append(msgs, ChatMessage{Role: "user", Content: t.Value})
		}
	}
	return msgs
}

// WriteShareGPT writes rows to w as ShareGPT JSON Lines. Empty rows write
// nothing.
func WriteShareGPT(w io.Writer, rows []schemas.SFTExample, opts ShareGPTOptions) error {
	return NewShareGPTWriter(w, opts).Write(rows...)
}

// ShareGPT converts one SFT example: the system prompt, the human turn
// (the state) and the gpt turn (the response), and the tools. Row in a
// returned *RowError is 0.
func ShareGPT(ex schemas.SFTExample, opts ShareGPTOptions) (ShareGPTRecord, error) {
	bad := func(field string, err error) error {
		return &RowError{Export: "sharegpt", ID: ex.ExampleID, Field: field, Err: err}
	}
	if ex.Split == schemas.HeldOut && !opts.AllowHeldOut {
		return ShareGPTRecord{}, bad("split", fmt.Errorf("task %s is held out: %w (evaluation tasks never go into training data)", ex.TaskID, ErrHeldOut))
	}
	form, err := ParsePromptForm(string(opts.Prompt), PromptFull)
	if err != nil {
		return ShareGPTRecord{}, bad("prompt", err)
	}
	msgs, field, err := Messages(ex.Prompt, ex.FullPrompt, form, opts.System)
	if err != nil {
		return ShareGPTRecord{}, bad(field, err)
	}
	if ex.Response == "" {
		return ShareGPTRecord{}, bad("response", errors.New("empty: an SFT example needs the expert's action text"))
	}
	var rec ShareGPTRecord
	if form != PromptPolicy {
		rec.Tools = toolsJSON()
	}
	if msgs[0].Role == "system" {
		rec.System, msgs = msgs[0].Content, msgs[1:]
	}
	rec.Conversations = []ShareGPTTurn{{From: RoleHuman, Value: msgs[0].Content}, {From: RoleGPT, Value: ex.Response}}
	return rec, nil
}

// LlamaFactoryDataset is one entry of LLaMA-Factory's dataset_info.json.
// For the ShareGPT exports WriteDatasetInfo registers three names, one
// over the policy's file and two over the full prompt's:
//
//	"mlerl_sft_policy": {
//	  "file_name": "sharegpt_policy.jsonl",
//	  "formatting": "sharegpt",
//	  "columns": {"messages": "conversations", "system": "system"},
//	  "tags": {"role_tag": "from", "content_tag": "value", "user_tag": "human",
//	           "assistant_tag": "gpt", "system_tag": "system"}
//	},
//	"mlerl_sft": { ... the same over "sharegpt.jsonl" },
//	"mlerl_sft_tools": { ... the same, and "tools": "tools" in columns }
//
// Train with `dataset: mlerl_sft_policy` to evaluate the model with mlerl
// afterwards (`mlerl evaluate --policy hf:DIR --adapter DIR`): its system
// column and human turn are the messages mlerl prompts a Hugging Face
// policy with (policy.PromptMessages), so the template renders the
// tokens the policy reads in mlerl. mlerl_sft trains on the full prompt
// instead, which mlerl never prompts its policies with:
//
//	  "file_name": "sharegpt.jsonl",
//	  "formatting": "sharegpt",
//	  "columns": {"messages": "conversations", "system": "system"},
//	  "tags": {"role_tag": "from", "content_tag": "value", "user_tag": "human",
//	           "assistant_tag": "gpt", "system_tag": "system"}
//	},
//	"mlerl_sft_tools": { ... the same, and "tools": "tools" in columns }
//
// its template places the system column as its system prompt, which
// lists the tools in the MLAgentBench format the answers use ("Action:
// ... Action Input: {...}").
// mlerl_sft_tools also hands LLaMA-Factory the tools column, which its
// template then renders into the system prompt a second time in its own
// tool format; use it with `tool_format: default`, whose format is the
// same "Action:/Action Input:" one (a model-specific format, such as
// Qwen's <tool_call> JSON, would ask for answers the data does not have).
type LlamaFactoryDataset struct {
	FileName   string            `json:"file_name"`
	Formatting string            `json:"formatting"`
	Columns    map[string]string `json:"columns"`
	Tags       LlamaFactoryTags  `json:"tags"`
}

// LlamaFactoryTags names the keys and role values of ShareGPT messages.
type LlamaFactoryTags struct {
	RoleTag      string `json:"role_tag"`
	ContentTag   string `json:"content_tag"`
	UserTag      string `json:"user_tag"`
	AssistantTag string `json:"assistant_tag"`
	SystemTag    string `json:"system_tag"`
}

// DatasetInfo returns the dataset_info.json entry for a ShareGPT export
// written to fileName (relative to LLaMA-Factory's dataset_dir), with the
// tools column declared or not.
func DatasetInfo(fileName string, tools bool) LlamaFactoryDataset {
	cols := map[string]string{"messages": "conversations", "system": "system"}
	if tools {
		cols["tools"] = "tools"
	}
	return LlamaFactoryDataset{
		FileName:   fileName,
		Formatting: "sharegpt",
		Columns:    cols,
		Tags: LlamaFactoryTags{
			RoleTag: "from", ContentTag: "value",
			UserTag: RoleHuman, AssistantTag: RoleGPT, SystemTag: RoleSystem,
		},
	}
}

// WriteDatasetInfo writes a whole dataset_info.json registering the
// ShareGPT export of the full prompt, fileName, as name (the `dataset:`
// value in LLaMA-Factory's training config; system prompt, no tools
// column) and as name+"_tools" (with the tools column), and the one of
// the policy's prompt, policyFile, as name+"_policy" (when not empty).
func WriteDatasetInfo(w io.Writer, name, fileName, policyFile string) error {
	if name == "" || fileName == "" {
		return errors.New("dataset_info.json: the dataset name and file name must not be empty")
	}
	entries := map[string]LlamaFactoryDataset{name: DatasetInfo(fileName, false), name + "_tools": DatasetInfo(fileName, true)}
	if policyFile != "" {
		entries[name+PolicySuffix] = DatasetInfo(policyFile, false)
	}
	b, err := json.MarshalIndent(entries, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ChatMessage is one element of verl's prompt column.
type ChatMessage struct {
	Role    string `parquet:"role" json:"role"`
	Content string `parquet:"content" json:"content"`
}

// VerlRewardModel is verl's reward_model column. Style "rule" tells verl
// to call a reward function (mlerl's restores the snapshot and runs the
// action) rather than a reward model; GroundTruth is the JSON of
// [VerlGroundTruth].
type VerlRewardModel struct {
	Style       string `parquet:"style,dict" json:"style"`
	GroundTruth string `parquet:"ground_truth" json:"ground_truth"`
}

// VerlExtraInfo is verl's extra_info column (passed to the reward
// function): where the state comes from.
type VerlExtraInfo struct {
	// StateID is the rl_states row, which `mlerl serve-env --rl_states`
	// looks up. Empty in the validation file: its held-out states are in
	// no rl_states dataset, so the reward adapter (scripts/verl_reward.py)
	// sends ground_truth's snapshot_ref instead, which serve-env accepts
	// with or without --rl_states.
	StateID string `parquet:"state_id" json:"state_id"`
	TaskID  string `parquet:"task_id,dict" json:"task_id"`
	Split   string `parquet:"split,dict" json:"split"` // held-in or held-out
	Index   int64  `parquet:"index" json:"index"`      // row number in the export
	// TrajectoryID is the expert trajectory the state comes from (empty
	// for a validation task's initial state, which no rollout visited).
	TrajectoryID string `parquet:"trajectory_id" json:"trajectory_id"`
	StepIndex    int64  `parquet:"step_index" json:"step_index"`
}

// VerlRow is one row of the verl export.
type VerlRow struct {
	DataSource  string          `parquet:"data_source,dict"`
	Prompt      []ChatMessage   `parquet:"prompt,list"`
	Ability     string          `parquet:"ability,dict"`
	RewardModel VerlRewardModel `parquet:"reward_model"`
	ExtraInfo   VerlExtraInfo   `parquet:"extra_info"`
}

// VerlGroundTruth is what a reward function needs to score an action from
// the state, besides the action: the snapshot to restore and the metric
// bookkeeping of mlerl's reward.
type VerlGroundTruth struct {
	TaskID      string   `json:"task_id"`
	SnapshotRef string   `json:"snapshot_ref"`
	Metric      string   `json:"metric"`
	Direction   string   `json:"direction"`
	MInit       float64  `json:"m_init"`
	MBest       float64  `json:"m_best"`
	MetricPrev  *float64 `json:"metric_prev"` // null before any valid run
	// The expert's own action from this state and what it earned, as a
	// baseline.
	ExpertAction string  `json:"expert_action"`
	ExpertReward float64 `json:"expert_reward"`
	ExpertExecS  float64 `json:"expert_exec_s"`
}

// VerlOptions configure [WriteVerl]. Start from [DefaultVerlOptions].
type VerlOptions struct {
	// DataSource routes rows to a reward function in verl. Default (and
	// when empty) "mlerl".
	DataSource string
	// Ability tags the task family. Default (and when empty)
	// "ml-engineering".
	Ability string
	// Prompt is the prompt form. Default (and when empty) PromptPolicy:
	// the messages mlerl prompts a Hugging Face policy with, so that a
	// model verl trains is evaluated in mlerl on the tokens it learned
	// from; PromptCompact drops the system message (a template then adds
	// its default one), PromptFull is the full prompt.
	Prompt PromptForm
	// System, when not empty, opens the system message. Default none.
	System string
	// Split is the split every row must have: held-in (default, and when
	// empty) for the training file, where a held-out row is an error
	// wrapping ErrHeldOut; held-out for the validation file, where a
	// held-in row is an error wrapping ErrHeldIn.
	Split string
	// Count, when set, counts each row's prompt tokens (with the
	// generation prompt), for [VerlWriter.PromptTokens]. Default nil: not
	// counted.
	Count ChatCounter
}

// DefaultVerlOptions returns the options of `mlerl dataset`'s training
// file (which sets Count: [QwenChat], or the export_tokenizer's).
func DefaultVerlOptions() VerlOptions {
	return VerlOptions{DataSource: "mlerl", Ability: "ml-engineering", Prompt: PromptPolicy, Split: schemas.HeldIn}
}

// Verl converts one RL state to a verl row; index is its row number.
func Verl(s schemas.RLState, index int64, opts VerlOptions) (VerlRow, error) {
	def := DefaultVerlOptions()
	if opts.DataSource == "" {
		opts.DataSource = def.DataSource
	}
	if opts.Ability == "" {
		opts.Ability = def.Ability
	}
	if opts.Split == "" {
		opts.Split = def.Split
	}
	bad := func(field string, err error) error {
		return &RowError{Export: "verl", Row: int(index), ID: s.StateID, Field: field, Err: err}
	}
	form, err := ParsePromptForm(string(opts.Prompt), def.Prompt)
	if err != nil {
		return VerlRow{}, bad("prompt", err)
	}
	switch {
	case s.StateID == "":
		return VerlRow{}, bad("state_id", errors.New("empty: every RL state needs its id"))
	case s.TaskID == "":
		return VerlRow{}, bad("task_id", errors.New("empty"))
	case s.Split != schemas.HeldIn && s.Split != schemas.HeldOut:
		return VerlRow{}, bad("split", fmt.Errorf("%q is neither %q nor %q", s.Split, schemas.HeldIn, schemas.HeldOut))
	case s.Split == schemas.HeldOut && opts.Split != schemas.HeldOut:
		return VerlRow{}, bad("split", fmt.Errorf("task %s is held out: %w (evaluation tasks never go into training data)", s.TaskID, ErrHeldOut))
	case s.Split == schemas.HeldIn && opts.Split == schemas.HeldOut:
		return VerlRow{}, bad("split", fmt.Errorf("task %s is held in: %w", s.TaskID, ErrHeldIn))
	case s.SnapshotRef == "":
		return VerlRow{}, bad("snapshot_ref", errors.New("empty: the reward function cannot restore the state"))
	}
	msgs, field, err := Messages(s.Prompt, s.FullPrompt, form, opts.System)
	if err != nil {
		return VerlRow{}, bad(field, err)
	}
	gt, err := json.Marshal(VerlGroundTruth{
		TaskID: s.TaskID, SnapshotRef: s.SnapshotRef,
		Metric: s.Metric, Direction: s.Direction, MInit: s.MInit, MBest: s.MBest, MetricPrev: s.MetricPrev,
		ExpertAction: s.ExpertAction, ExpertReward: s.ExpertReward, ExpertExecS: s.ExpertExecS,
	})
	if err != nil { // NaN or Inf in a metric
		return VerlRow{}, bad("m_init/m_best/metric_prev/expert_reward", err)
	}
	stateID := s.StateID
	if opts.Split == schemas.HeldOut {
		stateID = "" // see VerlExtraInfo.StateID
	}
	return VerlRow{
		DataSource:  opts.DataSource,
		Prompt:      msgs,
		Ability:     opts.Ability,
		RewardModel: VerlRewardModel{Style: "rule", GroundTruth: string(gt)},
		ExtraInfo: VerlExtraInfo{
			StateID: stateID, TaskID: s.TaskID, Split: s.Split, Index: index,
			TrajectoryID: s.TrajectoryID, StepIndex: int64(s.StepIndex),
		},
	}, nil
}

// VerlWriter streams RL states into one verl Parquet file.
type VerlWriter struct {
	pw     *parquet.GenericWriter[VerlRow]
	opts   VerlOptions
	rows   int64
	buf    []VerlRow
	tokens []int
}

// NewVerlWriter returns a writer of a Parquet file to w; Close writes the
// footer (and does not close w).
func NewVerlWriter(w io.Writer, opts VerlOptions) *VerlWriter {
	pw := parquet.NewGenericWriter[VerlRow](w,
		// The most widely readable layout: v1 data pages, PLAIN strings
		// (dictionaries for the repetitive columns), zstd.
		parquet.DataPageVersion(1),
		parquet.DefaultEncodingFor(parquet.ByteArray, &parquet.Plain),
		parquet.Compression(&parquet.Zstd),
		parquet.KeyValueMetadata("mlerl.export", "verl"),
	)
	return &VerlWriter{pw: pw, opts: opts}
}

// Write converts and appends rows. On a bad row it returns a *RowError and
// writes none of rows.
func (vw *VerlWriter) Write(rows ...schemas.RLState) error {
	vw.buf = vw.buf[:0]
	for i := range rows {
		r, err := Verl(rows[i], vw.rows+int64(i), vw.opts)
		if err != nil {
			return err
		}
		vw.buf = append(vw.buf, r)
	}
	if _, err := vw.pw.Write(vw.buf); err != nil {
		return fmt.Errorf("verl export: write rows %d-%d: %w", vw.rows, vw.rows+int64(len(rows))-1, err)
	}
	if vw.opts.Count != nil {
		for i, r := range vw.buf {
			n, err := vw.opts.Count(r.Prompt, true)
			if err != nil {
				return &RowError{Export: "verl", Row: int(vw.rows) + i, ID: rows[i].StateID, Field: "prompt", Err: fmt.Errorf("count tokens: %w", err)}
			}
			vw.tokens = append(vw.tokens, n)
		}
	}
	vw.rows += int64(len(rows))
	return nil
}

// Rows returns how many states were written.
func (vw *VerlWriter) Rows() int64 { return vw.rows }

// PromptTokens returns the prompt token count (VerlOptions.Count) of every
// row written, in order (nil without VerlOptions.Count). The caller must
// not modify it.
func (vw *VerlWriter) PromptTokens() []int { return vw.tokens }

// Close flushes the last row group and writes the Parquet footer.
func (vw *VerlWriter) Close() error {
	if err := vw.pw.Close(); err != nil {
		return fmt.Errorf("verl export: close: %w", err)
	}
	return nil
}

// WriteVerl writes rows to w as one verl Parquet file (a valid file with
// no rows when rows is empty).
func WriteVerl(w io.Writer, rows []schemas.RLState, opts VerlOptions) error {
	vw := NewVerlWriter(w, opts)
	if err := vw.Write(rows...); err != nil {
		return err
	}
	return vw.Close()
}

// Export file names under exports/<name>/v<N>/.
const (
	// ShareGPTPolicyFile holds the SFT examples with the policy's prompt
	// (PromptPolicy), ShareGPTFile with the full prompt.
	ShareGPTPolicyFile = "sharegpt_policy.jsonl"
	ShareGPTFile       = "sharegpt.jsonl"
	DatasetInfoFile    = "dataset_info.json"
	VerlTrainFile      = "verl_train.parquet"
	VerlValFile        = "verl_val.parquet"
	// LlamaFactoryName is the dataset name dataset_info.json registers
	// for ShareGPTFile (and, with "_tools", the entry that declares the
	// tools column); with PolicySuffix, for ShareGPTPolicyFile.
	LlamaFactoryName = "mlerl_sft"
	PolicySuffix     = "_policy"
)

// exportFormat is the version of what the exports write, part of the
// stage's run key when exports are on: bump it whenever a file changes
// or is added, so that a rerun with an unchanged config writes a new
// version instead of finding one whose exports differ from what this
// code writes. 2: sharegpt_policy.jsonl (mlerl_sft_policy) and verl's
// policy prompt form.
const exportFormat = 2

// valSnapshotRefsKey lists, in an rl_states manifest's Extra["exports"],
// the snapshots of the verl validation file.
const valSnapshotRefsKey = "verl_val_snapshot_refs"

// heldIn returns the rows of held-in tasks: exports are for training.
func heldIn[T any](rows []T, split func(T) string) []T {
	var out []T
	for _, r := range rows {
		if split(r) == schemas.HeldIn {
			out = append(out, r)
		}
	}
	return out
}

// exportConfig is what the stage's exports need: the token counter and
// its name, the verl prompt form and limit, LLaMA-Factory's cutoff, and
// where warnings go.
type exportConfig struct {
	count           ChatCounter
	tokenizer       string
	verlPrompt      PromptForm
	maxPromptLength int
	cutoffLen       int
	log             io.Writer
}

// sft writes the held-in examples as ShareGPT JSON Lines, once with the
// policy's prompt and once with the full prompt, and LLaMA-Factory's
// dataset_info.json registering them. Plan variants stay out: they are a
// training aid of the small policy (an LLM copies from its plan without
// them), and the export has no weights.
func (x exportConfig) sft(ctx context.Context, st store.Store, dir string, rows []schemas.SFTExample) ([]Attachment, map[string]any, []ExportStats, error) {
	train := slices.DeleteFunc(heldIn(rows, func(e schemas.SFTExample) string { return e.Split }), func(e schemas.SFTExample) bool {
		_, variant := variantSource(e.TrajectoryID)
		return variant
	})
	var atts []Attachment
	var stats []ExportStats
	info := map[string]any{"sharegpt_rows": len(train)}
	for _, f := range []struct {
		file, key string
		form      PromptForm
	}{{ShareGPTPolicyFile, "sharegpt_policy", PromptPolicy}, {ShareGPTFile, "sharegpt", PromptFull}} {
		opts := DefaultShareGPTOptions()
		opts.Prompt, opts.Count = f.form, x.count
		var sw *ShareGPTWriter
		a, err := writeAttachment(ctx, st, dir+"/"+f.file, func(w io.Writer) error {
			sw = NewShareGPTWriter(w, opts)
			return sw.Write(train...)
		})
		if err != nil {
			return nil, nil, nil, err
		}
		es := NewExportStats(f.file, "sharegpt", opts.Prompt, sw.PromptTokens(), 0, "the held-in examples")
		es.Tokenizer = x.tokenizer
		es.SetExamples(sw.ExampleTokens(), x.cutoffLen)
		if w := es.Warning(); w != "" {
			fmt.Fprintf(x.log, "dataset: %s\n", w)
		}
		atts, stats, info[f.key] = append(atts, a), append(stats, es), st.URI(a.Key)
	}
	b, err := writeAttachment(ctx, st, dir+"/"+DatasetInfoFile, func(w io.Writer) error {
		return WriteDatasetInfo(w, LlamaFactoryName, ShareGPTFile, ShareGPTPolicyFile)
	})
	if err != nil {
		return nil, nil, nil, err
	}
	info["dataset_info"] = st.URI(b.Key)
	return append(atts, b), info, stats, nil
}

// rl writes the held-in states as verl's training file and val, the
// held-out tasks' states, as its validation file, and warns when prompts
// are longer than verl's max_prompt_length.
func (x exportConfig) rl(ctx context.Context, st store.Store, dir string, rows, val []schemas.RLState, vc ValCounts) ([]Attachment, map[string]any, []ExportStats, error) {
	files := []struct {
		name, split, note string
		rows              []schemas.RLState
	}{
		{VerlTrainFile, schemas.HeldIn, "the held-in states of rl_states", heldIn(rows, func(s schemas.RLState) string { return s.Split })},
		{VerlValFile, schemas.HeldOut, fmt.Sprintf("%d held-out tasks: %d expert states of the rollout, %d initial states", vc.Tasks, vc.Rolled, vc.Initial), val},
	}
	var atts []Attachment
	var stats []ExportStats
	info := map[string]any{}
	for _, f := range files {
		opts := DefaultVerlOptions()
		opts.Prompt, opts.Split, opts.Count = x.verlPrompt, f.split, x.count
		var vw *VerlWriter
		a, err := writeAttachment(ctx, st, dir+"/"+f.name, func(w io.Writer) error {
			vw = NewVerlWriter(w, opts)
			if err := vw.Write(f.rows...); err != nil {
				return err
			}
			return vw.Close()
		})
		if err != nil {
			return nil, nil, nil, err
		}
		es := NewExportStats(f.name, "verl", opts.Prompt, vw.PromptTokens(), x.maxPromptLength, f.note)
		es.Tokenizer = x.tokenizer
		if w := es.Warning(); w != "" {
			fmt.Fprintf(x.log, "dataset: %s\n", w)
		}
		atts, stats = append(atts, a), append(stats, es)
		key := strings.TrimSuffix(f.name, ".parquet")
		info[key], info[key+"_rows"] = st.URI(a.Key), len(f.rows)
	}
	info["verl_prompt"] = x.verlPrompt
	// Publish copies these with the version: no row of rl_states names them.
	var refs []string
	for _, s := range val {
		if !slices.Contains(refs, s.SnapshotRef) {
			refs = append(refs, s.SnapshotRef)
		}
	}
	info[valSnapshotRefsKey] = refs
	return atts, info, stats, nil
}
