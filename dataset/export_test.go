package dataset

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	parquetfmt "github.com/apache/arrow/go/v17/parquet"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"
	"github.com/parquet-go/parquet-go"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/schemas"
)

func sftRows() []schemas.SFTExample {
	return []schemas.SFTExample{
		{
			ExampleID: "ex-0", TaskID: "digits", Split: schemas.HeldIn, TrajectoryID: "tr-0", StepIndex: 0,
			Prompt:     "Task: digits. Best: none.",
			FullPrompt: "You are a helpful research assistant.\nResearch Problem: improve accuracy on digits <tabular>.\n",
			Response:   "Action: Execute Script\nAction Input: {\"script_name\": \"train.py\"}",
		},
		{
			ExampleID: "ex-1", TaskID: "wine", Split: schemas.HeldIn, TrajectoryID: "tr-1", StepIndex: 3,
			Prompt:     "Task: wine (rmse ↓). Best: 0.61",
			FullPrompt: "Research Problem: 日本語 & unicode, tabs\tand \"quotes\"\n\n\n",
			Response:   "Action: Final Answer\nAction Input: {\"final_answer\": \"0.58 & done\"}",
		},
	}
}

// renderedFull is a full prompt as the renderer writes it: its tool
// list, a state, its answer format.
func renderedFull(state string) string {
	tools, format := agents.FullInstructions()
	return tools + "\n" + state + "\n" + format
}

func TestShareGPTReadBack(t *testing.T) {
	tools, format := agents.FullInstructions()
	system := strings.TrimRight(tools, "\n") + "\n" + format
	system = strings.TrimSpace(system)
	rendered := sftRows()
	rendered[0].FullPrompt = renderedFull("Research Problem (digits): improve accuracy.\nStep 1:\nAction: List Files")
	type rec struct {
		system string
		turns  []ShareGPTTurn
	}
	tests := []struct {
		name string
		rows []schemas.SFTExample
		opts ShareGPTOptions
		want []rec
	}{
		{"full prompt: fixed parts in system, the state in the human turn", rendered, DefaultShareGPTOptions(), []rec{
			{system, []ShareGPTTurn{{RoleHuman, "Research Problem (digits): improve accuracy.\nStep 1:\nAction: List Files"}, {RoleGPT, rendered[0].Response}}},
			// Not the renderer's text (an older dataset): whole in the human turn.
			{"", []ShareGPTTurn{{RoleHuman, rendered[1].FullPrompt}, {RoleGPT, rendered[1].Response}}},
		}},
		{"full prompt with a system of our own", rendered[:1], ShareGPTOptions{System: "Be brief."}, []rec{
			{"Be brief.\n\n" + system, []ShareGPTTurn{{RoleHuman, "Research Problem (digits): improve accuracy.\nStep 1:\nAction: List Files"}, {RoleGPT, rendered[0].Response}}},
		}},
		{"compact with system", sftRows(), ShareGPTOptions{Prompt: PromptCompact, System: "You improve ML scripts."}, []rec{
			{"You improve ML scripts.", []ShareGPTTurn{{RoleHuman, sftRows()[0].Prompt}, {RoleGPT, sftRows()[0].Response}}},
			{"You improve ML scripts.", []ShareGPTTurn{{RoleHuman, sftRows()[1].Prompt}, {RoleGPT, sftRows()[1].Response}}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteShareGPT(&buf, tt.rows, tt.opts); err != nil {
				t.Fatal(err)
			}
			got := readShareGPT(t, buf.Bytes())
			if len(got) != len(tt.want) {
				t.Fatalf("%d records, want %d", len(got), len(tt.want))
			}
			for i, r := range got {
				if r.System != tt.want[i].system || !reflect.DeepEqual(r.Conversations, tt.want[i].turns) {
					t.Errorf("record %d: system %q\nturns %v\nwant system %q\nturns %v", i, r.System, r.Conversations, tt.want[i].system, tt.want[i].turns)
				}
			}
		})
	}
}

// readShareGPT decodes ShareGPT JSON Lines as LLaMA-Factory reads them,
// generically first: each line has exactly the columns dataset_info.json
// declares (conversations, system, tools), every turn exactly from and
// value, the tools a JSON list of functions with a name, a description
// and a JSON Schema object of parameters.
func readShareGPT(t *testing.T, b []byte) []ShareGPTRecord {
	t.Helper()
	var out []ShareGPTRecord
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		n := len(out) + 1
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			t.Fatalf("line %d is not a JSON object: %v", n, err)
		}
		// The policy's prompt names its actions itself: no tools column.
		keys := slices.Sorted(maps.Keys(raw))
		if !slices.Equal(keys, []string{"conversations", "system", "tools"}) && !slices.Equal(keys, []string{"conversations", "system"}) {
			t.Fatalf("line %d has columns %v, want conversations, system and (but for the policy's prompt) tools", n, keys)
		}
		var rec ShareGPTRecord
		var turns []map[string]string
		if err := json.Unmarshal(raw["conversations"], &turns); err != nil {
			t.Fatalf("line %d: conversations: %v", n, err)
		}
		for _, m := range turns {
			if len(m) != 2 || m["from"] == "" {
				t.Fatalf("line %d: turn %v: want exactly from and value", n, m)
			}
			rec.Conversations = append(rec.Conversations, ShareGPTTurn{From: m["from"], Value: m["value"]})
		}
		if len(turns) != 2 || turns[0]["from"] != RoleHuman || turns[1]["from"] != RoleGPT {
			t.Fatalf("line %d: turns %v, want human then gpt (LLaMA-Factory's odd and even positions)", n, turns)
		}
		if err := json.Unmarshal(raw["system"], &rec.System); err != nil {
			t.Fatalf("line %d: system is not a string: %v", n, err)
		}
		if _, ok := raw["tools"]; !ok {
			out = append(out, rec)
			continue
		}
		if err := json.Unmarshal(raw["tools"], &rec.Tools); err != nil {
			t.Fatalf("line %d: tools is not a string (LLaMA-Factory reads a JSON text): %v", n, err)
		}
		var tools []struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			Parameters  map[string]any `json:"parameters"`
		}
		if err := json.Unmarshal([]byte(rec.Tools), &tools); err != nil || len(tools) != len(env.ActionNames()) {
			t.Fatalf("line %d: tools %q: %v, want the %d actions", n, rec.Tools, err, len(env.ActionNames()))
		}
		for _, tool := range tools {
			if tool.Name == "" || tool.Description == "" || tool.Parameters["type"] != "object" || tool.Parameters["properties"] == nil {
				t.Errorf("line %d: tool %+v: want a name, a description and a JSON Schema object", n, tool)
			}
		}
		out = append(out, rec)
	}
	return out
}

func TestShareGPTErrors(t *testing.T) {
	heldOut := sftRows()[1]
	heldOut.Split = schemas.HeldOut
	noResp := sftRows()[1]
	noResp.Response = ""
	noPrompt := sftRows()[1]
	noPrompt.FullPrompt = ""
	tests := []struct {
		name    string
		row     schemas.SFTExample
		opts    ShareGPTOptions
		field   string
		heldOut bool
	}{
		{"held out", heldOut, DefaultShareGPTOptions(), "split", true},
		{"no response", noResp, DefaultShareGPTOptions(), "response", false},
		{"no full prompt", noPrompt, DefaultShareGPTOptions(), "full_prompt", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := WriteShareGPT(&buf, []schemas.SFTExample{sftRows()[0], tt.row}, tt.opts)
			var re *RowError
			if !errors.As(err, &re) {
				t.Fatalf("error = %v, want a *RowError", err)
			}
			if re.Row != 1 || re.Field != tt.field || re.ID != "ex-1" {
				t.Errorf("RowError row %d field %q id %q, want row 1 field %q id ex-1", re.Row, re.Field, re.ID, tt.field)
			}
			if got := errors.Is(err, ErrHeldOut); got != tt.heldOut {
				t.Errorf("errors.Is(err, ErrHeldOut) = %v, want %v", got, tt.heldOut)
			}
			if n := strings.Count(buf.String(), "\n"); n != 1 {
				t.Errorf("%d lines written, want 1 (the good row before the bad one)", n)
			}
		})
	}
	if err := WriteShareGPT(&bytes.Buffer{}, sftRows(), ShareGPTOptions{Prompt: "short"}); err == nil {
		t.Errorf("prompt form %q: got nil error", "short")
	}
	// An evaluation export may carry held-out tasks when asked to.
	if err := WriteShareGPT(&bytes.Buffer{}, []schemas.SFTExample{heldOut}, ShareGPTOptions{AllowHeldOut: true}); err != nil {
		t.Errorf("AllowHeldOut: %v", err)
	}
}

func TestDatasetInfo(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteDatasetInfo(&buf, "mlerl_sft", "sft.sharegpt.jsonl", "policy.jsonl"); err != nil {
		t.Fatal(err)
	}
	var got map[string]map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("dataset_info.json is not JSON: %v", err)
	}
	entry := func(file string, cols map[string]any) map[string]any {
		return map[string]any{
			"file_name":  file,
			"formatting": "sharegpt",
			"columns":    cols,
			"tags": map[string]any{
				"role_tag": "from", "content_tag": "value", "user_tag": "human",
				"assistant_tag": "gpt", "system_tag": "system",
			},
		}
	}
	want := map[string]map[string]any{
		"mlerl_sft":        entry("sft.sharegpt.jsonl", map[string]any{"messages": "conversations", "system": "system"}),
		"mlerl_sft_tools":  entry("sft.sharegpt.jsonl", map[string]any{"messages": "conversations", "system": "system", "tools": "tools"}),
		"mlerl_sft_policy": entry("policy.jsonl", map[string]any{"messages": "conversations", "system": "system"}),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("dataset_info.json = %v\nwant %v", got, want)
	}
	if err := WriteDatasetInfo(&buf, "", "x.jsonl", ""); err == nil {
		t.Errorf("empty dataset name: got nil error")
	}
}

func ptr(f float64) *float64 { return &f }

func rlRows() []schemas.RLState {
	return []schemas.RLState{
		{
			StateID: "st-0", TaskID: "digits", Split: schemas.HeldIn, TrajectoryID: "tr-0", StepIndex: 2,
			Prompt: "compact 0", FullPrompt: "Research Problem: digits\nStep 2.",
			SnapshotRef: "sha256:aa", Metric: "accuracy", Direction: schemas.HigherIsBetter,
			MInit: 0.91, MBest: 0.98, MetricPrev: ptr(0.93),
			ExpertAction: "Action: Execute Script", ExpertReward: 0.4, ExpertExecS: 1.5,
		},
		{
			StateID: "st-1", TaskID: "wine", Split: schemas.HeldIn, TrajectoryID: "tr-1", StepIndex: 0,
			Prompt: "compact 1", FullPrompt: "Research Problem: wine 日本 <|im_end|>",
			SnapshotRef: "sha256:bb", Metric: "rmse", Direction: schemas.LowerIsBetter,
			MInit: 0.7, MBest: 0.5,
		},
	}
}

func wantVerl(opts VerlOptions) []VerlRow {
	var out []VerlRow
	for i, s := range rlRows() {
		r, err := Verl(s, int64(i), opts)
		if err != nil {
			panic(err)
		}
		out = append(out, r)
	}
	return out
}

func TestVerlRow(t *testing.T) {
	r, err := Verl(rlRows()[0], 7, DefaultVerlOptions())
	if err != nil {
		t.Fatal(err)
	}
	want := VerlRow{
		DataSource: "mlerl",
		// The policy's prompt by default: mlerl's system message, the
		// compact prompt as the user turn.
		Prompt: []ChatMessage{{Role: "system", Content: policy.SystemPrompt}, {Role: "user", Content: "compact 0"}},

		Ability:     "ml-engineering",
		RewardModel: VerlRewardModel{Style: "rule", GroundTruth: r.RewardModel.GroundTruth},
		ExtraInfo:   VerlExtraInfo{StateID: "st-0", TaskID: "digits", Split: schemas.HeldIn, Index: 7, TrajectoryID: "tr-0", StepIndex: 2},
	}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("Verl = %+v\nwant %+v", r, want)
	}
	var gt VerlGroundTruth
	if err := json.Unmarshal([]byte(r.RewardModel.GroundTruth), &gt); err != nil {
		t.Fatalf("ground_truth is not JSON: %v", err)
	}
	if gt.SnapshotRef != "sha256:aa" || gt.MetricPrev == nil || *gt.MetricPrev != 0.93 || gt.Direction != "higher" || gt.MBest != 0.98 {
		t.Errorf("ground_truth = %+v, want the state's snapshot and metrics", gt)
	}
	compact, err := Verl(rlRows()[1], 0, VerlOptions{Prompt: PromptCompact, System: "sys"})
	if err != nil {
		t.Fatal(err)
	}
	wantMsgs := []ChatMessage{{Role: "system", Content: "sys"}, {Role: "user", Content: "compact 1"}}
	if !reflect.DeepEqual(compact.Prompt, wantMsgs) || compact.DataSource != "mlerl" {
		t.Errorf("compact prompt = %+v, data_source %q, want %+v and the default data_source", compact.Prompt, compact.DataSource, wantMsgs)
	}
	// The full prompt: the renderer's fixed parts in a system message.
	s := rlRows()[0]
	s.FullPrompt = renderedFull("Research Problem (digits): more accuracy.")
	full, err := Verl(s, 0, VerlOptions{Prompt: PromptFull})
	if err != nil {
		t.Fatal(err)
	}
	tools, format := agents.FullInstructions()
	if len(full.Prompt) != 2 || full.Prompt[0].Role != "system" || !strings.HasPrefix(full.Prompt[0].Content, strings.TrimRight(tools, "\n")) ||
		!strings.HasSuffix(full.Prompt[0].Content, strings.TrimSpace(format)) || full.Prompt[1] != (ChatMessage{Role: "user", Content: "Research Problem (digits): more accuracy."}) {
		t.Errorf("full prompt = %+v, want the tools and format as system, the state as user", full.Prompt)
	}
	// The validation file: held-out rows, no state id (they are in no
	// rl_states dataset; the adapter sends the snapshot_ref).
	s.Split = schemas.HeldOut
	v, err := Verl(s, 3, VerlOptions{Split: schemas.HeldOut})
	if err != nil {
		t.Fatal(err)
	}
	if v.ExtraInfo.StateID != "" || v.ExtraInfo.Split != schemas.HeldOut || !strings.Contains(v.RewardModel.GroundTruth, `"snapshot_ref":"sha256:aa"`) {
		t.Errorf("validation row extra_info %+v, ground_truth %s: want no state_id, split held-out and the snapshot_ref", v.ExtraInfo, v.RewardModel.GroundTruth)
	}
}

func TestVerlErrors(t *testing.T) {
	edit := func(f func(s *schemas.RLState)) schemas.RLState {
		s := rlRows()[1]
		f(&s)
		return s
	}
	tests := []struct {
		name  string
		row   schemas.RLState
		field string
	}{
		{"held out", edit(func(s *schemas.RLState) { s.Split = schemas.HeldOut }), "split"},
		{"bad split", edit(func(s *schemas.RLState) { s.Split = "train" }), "split"},
		{"no id", edit(func(s *schemas.RLState) { s.StateID = "" }), "state_id"},
		{"no snapshot", edit(func(s *schemas.RLState) { s.SnapshotRef = "" }), "snapshot_ref"},
		{"no prompt", edit(func(s *schemas.RLState) { s.Prompt = "" }), "prompt"},
		{"nan metric", edit(func(s *schemas.RLState) { s.MInit = math.NaN() }), "m_init/m_best/metric_prev/expert_reward"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := WriteVerl(&bytes.Buffer{}, []schemas.RLState{rlRows()[0], tt.row}, DefaultVerlOptions())
			var re *RowError
			if !errors.As(err, &re) || re.Field != tt.field || re.Row != 1 {
				t.Fatalf("error = %v, want a *RowError for row 1 field %q", err, tt.field)
			}
		})
	}
	// The validation file refuses held-in rows; the full prompt is checked
	// when asked for.
	val := DefaultVerlOptions()
	val.Split = schemas.HeldOut
	if err := WriteVerl(&bytes.Buffer{}, rlRows()[:1], val); !errors.Is(err, ErrHeldIn) {
		t.Errorf("held-in row in the validation file: error %v, want one wrapping ErrHeldIn", err)
	}
	full := DefaultVerlOptions()
	full.Prompt = PromptFull
	if err := WriteVerl(&bytes.Buffer{}, []schemas.RLState{edit(func(s *schemas.RLState) { s.FullPrompt = "" })}, full); err == nil || !strings.Contains(err.Error(), "full_prompt") {
		t.Errorf("no full prompt: error %v, want one naming full_prompt", err)
	}
}

// TestVerlReadBackParquetGo reads the export with parquet-go into the row
// type and compares every value.
func TestVerlReadBackParquetGo(t *testing.T) {
	var buf bytes.Buffer
	vw := NewVerlWriter(&buf, DefaultVerlOptions())
	// Two Write calls: index keeps counting across them.
	if err := vw.Write(rlRows()[0]); err != nil {
		t.Fatal(err)
	}
	if err := vw.Write(rlRows()[1]); err != nil {
		t.Fatal(err)
	}
	if err := vw.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := parquet.Read[VerlRow](bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if want := wantVerl(DefaultVerlOptions()); !reflect.DeepEqual(got, want) {
		t.Errorf("parquet-go read back\n%+v\nwant\n%+v", got, want)
	}
}

// TestVerlReadBackArrow reads the export with Arrow, as pyarrow (and so
// verl's datasets loader) would.
func TestVerlReadBackArrow(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteVerl(&buf, rlRows(), DefaultVerlOptions()); err != nil {
		t.Fatal(err)
	}
	if got, want := readVerlArrow(t, buf.Bytes()), wantVerl(DefaultVerlOptions()); !reflect.DeepEqual(got, want) {
		t.Errorf("Arrow read back\n%+v\nwant\n%+v", got, want)
	}
}

// readVerlArrow reads a verl export with Apache Arrow's Parquet reader
// (pqarrow) and checks what verl's RLHFDataset needs: the columns
// data_source, prompt (list<struct<role, content>>), ability,
// reward_model (struct<style, ground_truth>) and extra_info (struct of
// state_id, task_id, split, index, trajectory_id, step_index), in one
// chunk each, written with encodings every Parquet reader knows. It
// returns the rows, every value read through Arrow's arrays.
func readVerlArrow(t *testing.T, data []byte) []VerlRow {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	pr, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	// Only encodings every Parquet reader knows (no delta encodings).
	for g := range pr.NumRowGroups() {
		rg := pr.MetaData().RowGroup(g)
		for c := range rg.NumColumns() {
			cc, err := rg.ColumnChunk(c)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range cc.Encodings() {
				switch e {
				case parquetfmt.Encodings.Plain, parquetfmt.Encodings.RLE, parquetfmt.Encodings.RLEDict, parquetfmt.Encodings.PlainDict:
				default:
					t.Errorf("column %s uses encoding %s, want PLAIN, RLE or dictionary", cc.PathInSchema(), e)
				}
			}
		}
	}
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{}, mem)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()

	wantStruct := func(dt arrow.DataType, names []string, types ...arrow.Type) error {
		st, ok := dt.(*arrow.StructType)
		if !ok {
			return fmt.Errorf("type %s, want struct", dt)
		}
		if st.NumFields() != len(names) {
			return fmt.Errorf("struct %s has %d fields, want %d %v", st, st.NumFields(), len(names), names)
		}
		for i, n := range names {
			f := st.Field(i)
			if f.Name != n || f.Type.ID() != types[i] {
				return fmt.Errorf("struct field %d = %s %s, want %s %s", i, f.Name, f.Type, n, types[i])
			}
		}
		return nil
	}
	sch := tbl.Schema()
	var names []string
	for _, f := range sch.Fields() {
		names = append(names, f.Name)
	}
	if !slices.Equal(names, []string{"data_source", "prompt", "ability", "reward_model", "extra_info"}) {
		t.Fatalf("columns = %v, want data_source, prompt, ability, reward_model, extra_info", names)
	}
	for _, c := range []int{0, 2} {
		if id := sch.Field(c).Type.ID(); id != arrow.STRING {
			t.Fatalf("column %s is %s, want string", sch.Field(c).Name, sch.Field(c).Type)
		}
	}
	lt, ok := sch.Field(1).Type.(*arrow.ListType)
	if !ok {
		t.Fatalf("prompt is %s, want list<struct<role, content>>", sch.Field(1).Type)
	}
	if err := wantStruct(lt.Elem(), []string{"role", "content"}, arrow.STRING, arrow.STRING); err != nil {
		t.Fatalf("prompt element: %v", err)
	}
	if err := wantStruct(sch.Field(3).Type, []string{"style", "ground_truth"}, arrow.STRING, arrow.STRING); err != nil {
		t.Fatalf("reward_model: %v", err)
	}
	if err := wantStruct(sch.Field(4).Type, []string{"state_id", "task_id", "split", "index", "trajectory_id", "step_index"},
		arrow.STRING, arrow.STRING, arrow.STRING, arrow.INT64, arrow.STRING, arrow.INT64); err != nil {
		t.Fatalf("extra_info: %v", err)
	}
	if tbl.NumRows() == 0 {
		return nil
	}

	col := func(i int) arrow.Array {
		ch := tbl.Column(i).Data().Chunks()
		if len(ch) != 1 {
			t.Fatalf("column %d: %d chunks, want 1", i, len(ch))
		}
		return ch[0]
	}
	str := func(a arrow.Array, i int) string { return a.(*array.String).Value(i) }
	ds, ab := col(0), col(2)
	prompts := col(1).(*array.List)
	elems := prompts.ListValues().(*array.Struct)
	rm, ei := col(3).(*array.Struct), col(4).(*array.Struct)
	out := make([]VerlRow, tbl.NumRows())
	for r := range out {
		start, end := prompts.ValueOffsets(r)
		var msgs []ChatMessage
		for k := start; k < end; k++ {
			msgs = append(msgs, ChatMessage{Role: str(elems.Field(0), int(k)), Content: str(elems.Field(1), int(k))})
		}
		out[r] = VerlRow{
			DataSource: str(ds, r), Prompt: msgs, Ability: str(ab, r),
			RewardModel: VerlRewardModel{Style: str(rm.Field(0), r), GroundTruth: str(rm.Field(1), r)},
			ExtraInfo: VerlExtraInfo{
				StateID: str(ei.Field(0), r), TaskID: str(ei.Field(1), r), Split: str(ei.Field(2), r),
				Index: ei.Field(3).(*array.Int64).Value(r), TrajectoryID: str(ei.Field(4), r), StepIndex: ei.Field(5).(*array.Int64).Value(r),
			},
		}
	}
	return out
}

func TestVerlEmpty(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteVerl(&buf, nil, DefaultVerlOptions()); err != nil {
		t.Fatal(err)
	}
	got, err := parquet.Read[VerlRow](bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil || len(got) != 0 {
		t.Fatalf("empty export read back %d rows, %v; want 0, nil", len(got), err)
	}
}

func ExampleWriteShareGPT() {
	rows := []schemas.SFTExample{{
		ExampleID: "ex-0", TaskID: "digits", Split: schemas.HeldIn,
		Prompt:     "Task: digits. Score: initial 0.8219.",
		FullPrompt: "Research Problem: improve accuracy.",
		Response:   "Action: Execute Script\nAction Input: {\"script_name\": \"train.py\"}",
	}}
	opts := DefaultShareGPTOptions()
	opts.Prompt = PromptCompact
	var buf bytes.Buffer
	if err := WriteShareGPT(&buf, rows, opts); err != nil {
		fmt.Println(err)
	}
	var rec ShareGPTRecord
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		fmt.Println(err)
	}
	fmt.Printf("system %q\n", rec.System)
	for _, turn := range rec.Conversations {
		fmt.Printf("%s: %q\n", turn.From, turn.Value)
	}
	fmt.Println("tools:", strings.Count(rec.Tools, `"name"`), "functions")
	// Output:
	// system ""
	// human: "Task: digits. Score: initial 0.8219."
	// gpt: "Action: Execute Script\nAction Input: {\"script_name\": \"train.py\"}"
	// tools: 9 functions
}
