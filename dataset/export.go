package dataset

// Exports for trainers other teams already use:
//
//   - SFT examples as ShareGPT JSON Lines, the layout LLaMA-Factory reads
//     with "formatting": "sharegpt" (WriteShareGPT; WriteDatasetInfo writes
//     the dataset_info.json entry that registers the file);
//   - RL states as verl's RL Parquet layout (WriteVerl): data_source,
//     prompt (chat messages), ability, reward_model{style, ground_truth},
//     extra_info{state_id, task_id, split, index, ...}.
//
// Writers take an io.Writer, so the same code writes a local file, a
// buffer or an object-store upload. Rows of held-out tasks are refused
// unless the options allow them: an export meant for training must never
// carry an evaluation task.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"

	"github.com/mlerl/mlerl/schemas"
)

// ErrHeldOut is wrapped by errors about a held-out task's row given to an
// export that does not allow them.
var ErrHeldOut = errors.New("held-out task in a training export")

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
	Conversations []ShareGPTTurn `json:"conversations"`
}

// ShareGPTOptions configure [WriteShareGPT]. Start from
// [DefaultShareGPTOptions].
type ShareGPTOptions struct {
	// System, when not empty, is written as a leading "system" turn
	// (LLaMA-Factory moves it to the system prompt). Default: none, since
	// the full prompt carries its own instructions.
	System string
	// Compact uses the compact prompt (the small policy's input) instead of
	// the full MLAgentBench-style one. Default false: large trainers get
	// the full prompt.
	Compact bool
	// AllowHeldOut lets rows of held-out tasks through (an evaluation
	// export). Default false: they are an error wrapping ErrHeldOut.
	AllowHeldOut bool
}

// DefaultShareGPTOptions returns the options of `mlerl dataset`'s export.
func DefaultShareGPTOptions() ShareGPTOptions { return ShareGPTOptions{} }

// ShareGPTWriter streams SFT examples as ShareGPT JSON Lines.
type ShareGPTWriter struct {
	enc  *json.Encoder
	opts ShareGPTOptions
	rows int
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
		if err := sw.enc.Encode(rec); err != nil {
			return fmt.Errorf("sharegpt export: write row %d: %w", sw.rows, err)
		}
		sw.rows++
	}
	return nil
}

// Rows returns how many examples were written.
func (sw *ShareGPTWriter) Rows() int { return sw.rows }

// WriteShareGPT writes rows to w as ShareGPT JSON Lines. Empty rows write
// nothing.
func WriteShareGPT(w io.Writer, rows []schemas.SFTExample, opts ShareGPTOptions) error {
	return NewShareGPTWriter(w, opts).Write(rows...)
}

// ShareGPT converts one SFT example: [system,] human (the prompt), gpt (the
// response). Row in a returned *RowError is 0.
func ShareGPT(ex schemas.SFTExample, opts ShareGPTOptions) (ShareGPTRecord, error) {
	bad := func(field string, err error) error {
		return &RowError{Export: "sharegpt", ID: ex.ExampleID, Field: field, Err: err}
	}
	if ex.Split == schemas.HeldOut && !opts.AllowHeldOut {
		return ShareGPTRecord{}, bad("split", fmt.Errorf("task %s is held out: %w (evaluation tasks never go into training data)", ex.TaskID, ErrHeldOut))
	}
	prompt, field := ex.FullPrompt, "full_prompt"
	if opts.Compact {
		prompt, field = ex.Prompt, "prompt"
	}
	if prompt == "" {
		return ShareGPTRecord{}, bad(field, errEmpty)
	}
	if ex.Response == "" {
		return ShareGPTRecord{}, bad("response", errors.New("empty: an SFT example needs the expert's action text"))
	}
	var rec ShareGPTRecord
	if opts.System != "" {
		rec.Conversations = append(rec.Conversations, ShareGPTTurn{From: RoleSystem, Value: opts.System})
	}
	rec.Conversations = append(rec.Conversations,
		ShareGPTTurn{From: RoleHuman, Value: prompt},
		ShareGPTTurn{From: RoleGPT, Value: ex.Response})
	return rec, nil
}

// LlamaFactoryDataset is one entry of LLaMA-Factory's dataset_info.json.
// For the ShareGPT export it reads:
//
//	"mlerl_sft": {
//	  "file_name": "sft.sharegpt.jsonl",
//	  "formatting": "sharegpt",
//	  "columns": {"messages": "conversations"},
//	  "tags": {"role_tag": "from", "content_tag": "value", "user_tag": "human",
//	           "assistant_tag": "gpt", "system_tag": "system"}
//	}
//
// Put dataset_info.json and the JSONL file in LLaMA-Factory's dataset_dir
// and train with `dataset: mlerl_sft`.
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
// written to fileName (relative to LLaMA-Factory's dataset_dir).
func DatasetInfo(fileName string) LlamaFactoryDataset {
	return LlamaFactoryDataset{
		FileName:   fileName,
		Formatting: "sharegpt",
		Columns:    map[string]string{"messages": "conversations"},
		Tags: LlamaFactoryTags{
			RoleTag: "from", ContentTag: "value",
			UserTag: RoleHuman, AssistantTag: RoleGPT, SystemTag: RoleSystem,
		},
	}
}

// WriteDatasetInfo writes a whole dataset_info.json registering one
// ShareGPT export under name (the `dataset:` value in LLaMA-Factory's
// training config).
func WriteDatasetInfo(w io.Writer, name, fileName string) error {
	if name == "" || fileName == "" {
		return errors.New("dataset_info.json: the dataset name and file name must not be empty")
	}
	b, err := json.MarshalIndent(map[string]LlamaFactoryDataset{name: DatasetInfo(fileName)}, "", "  ")
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
	StateID      string `parquet:"state_id" json:"state_id"`
	TaskID       string `parquet:"task_id,dict" json:"task_id"`
	Split        string `parquet:"split,dict" json:"split"` // held-in or held-out
	Index        int64  `parquet:"index" json:"index"`      // row number in the export
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
	// System, when not empty, is a leading system message. Default none.
	System string
	// Compact uses the compact prompt instead of the full one. Default false.
	Compact bool
	// AllowHeldOut lets rows of held-out tasks through (a validation file).
	// Default false: they are an error wrapping ErrHeldOut.
	AllowHeldOut bool
}

// DefaultVerlOptions returns the options of `mlerl dataset`'s export.
func DefaultVerlOptions() VerlOptions {
	return VerlOptions{DataSource: "mlerl", Ability: "ml-engineering"}
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
	bad := func(field string, err error) error {
		return &RowError{Export: "verl", Row: int(index), ID: s.StateID, Field: field, Err: err}
	}
	switch {
	case s.StateID == "":
		return VerlRow{}, bad("state_id", errors.New("empty: every RL state needs its id"))
	case s.TaskID == "":
		return VerlRow{}, bad("task_id", errors.New("empty"))
	case s.Split != schemas.HeldIn && s.Split != schemas.HeldOut:
		return VerlRow{}, bad("split", fmt.Errorf("%q is neither %q nor %q", s.Split, schemas.HeldIn, schemas.HeldOut))
	case s.Split == schemas.HeldOut && !opts.AllowHeldOut:
		return VerlRow{}, bad("split", fmt.Errorf("task %s is held out: %w (evaluation tasks never go into training data)", s.TaskID, ErrHeldOut))
	case s.SnapshotRef == "":
		return VerlRow{}, bad("snapshot_ref", errors.New("empty: the reward function cannot restore the state"))
	}
	prompt, field := s.FullPrompt, "full_prompt"
	if opts.Compact {
		prompt, field = s.Prompt, "prompt"
	}
	if prompt == "" {
		return VerlRow{}, bad(field, errEmpty)
	}
	gt, err := json.Marshal(VerlGroundTruth{
		TaskID: s.TaskID, SnapshotRef: s.SnapshotRef,
		Metric: s.Metric, Direction: s.Direction, MInit: s.MInit, MBest: s.MBest, MetricPrev: s.MetricPrev,
		ExpertAction: s.ExpertAction, ExpertReward: s.ExpertReward, ExpertExecS: s.ExpertExecS,
	})
	if err != nil { // NaN or Inf in a metric
		return VerlRow{}, bad("m_init/m_best/metric_prev/expert_reward", err)
	}
	var msgs []ChatMessage
	if opts.System != "" {
		msgs = append(msgs, ChatMessage{Role: "system", Content: opts.System})
	}
	msgs = append(msgs, ChatMessage{Role: "user", Content: prompt})
	return VerlRow{
		DataSource:  opts.DataSource,
		Prompt:      msgs,
		Ability:     opts.Ability,
		RewardModel: VerlRewardModel{Style: "rule", GroundTruth: string(gt)},
		ExtraInfo: VerlExtraInfo{
			StateID: s.StateID, TaskID: s.TaskID, Split: s.Split, Index: index,
			TrajectoryID: s.TrajectoryID, StepIndex: int64(s.StepIndex),
		},
	}, nil
}

// VerlWriter streams RL states into one verl Parquet file.
type VerlWriter struct {
	pw   *parquet.GenericWriter[VerlRow]
	opts VerlOptions
	rows int64
	buf  []VerlRow
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
	vw.rows += int64(len(rows))
	return nil
}

// Rows returns how many states were written.
func (vw *VerlWriter) Rows() int64 { return vw.rows }

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
