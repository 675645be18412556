package dataset

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	parquetfmt "github.com/apache/arrow/go/v17/parquet"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"
	"github.com/parquet-go/parquet-go"

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

func TestShareGPTReadBack(t *testing.T) {
	tests := []struct {
		name string
		opts ShareGPTOptions
		want [][]ShareGPTTurn
	}{
		{"default full prompt", DefaultShareGPTOptions(), [][]ShareGPTTurn{
			{{RoleHuman, sftRows()[0].FullPrompt}, {RoleGPT, sftRows()[0].Response}},
			{{RoleHuman, sftRows()[1].FullPrompt}, {RoleGPT, sftRows()[1].Response}},
		}},
		{"compact with system", ShareGPTOptions{Compact: true, System: "You improve ML scripts."}, [][]ShareGPTTurn{
			{{RoleSystem, "You improve ML scripts."}, {RoleHuman, sftRows()[0].Prompt}, {RoleGPT, sftRows()[0].Response}},
			{{RoleSystem, "You improve ML scripts."}, {RoleHuman, sftRows()[1].Prompt}, {RoleGPT, sftRows()[1].Response}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteShareGPT(&buf, sftRows(), tt.opts); err != nil {
				t.Fatal(err)
			}
			sc := bufio.NewScanner(&buf)
			var got [][]ShareGPTTurn
			for sc.Scan() {
				// Decode generically first: the keys must be exactly LLaMA-Factory's.
				var raw map[string][]map[string]string
				if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
					t.Fatalf("line %d is not a JSON object of conversations: %v: %s", len(got)+1, err, sc.Text())
				}
				if len(raw) != 1 || raw["conversations"] == nil {
					t.Fatalf("line %d keys = %v, want only conversations", len(got)+1, raw)
				}
				var turns []ShareGPTTurn
				for _, m := range raw["conversations"] {
					if len(m) != 2 {
						t.Fatalf("turn %v: want exactly from and value", m)
					}
					turns = append(turns, ShareGPTTurn{From: m["from"], Value: m["value"]})
				}
				got = append(got, turns)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("read back %v\nwant %v", got, tt.want)
			}
		})
	}
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
	// An evaluation export may carry held-out tasks when asked to.
	if err := WriteShareGPT(&bytes.Buffer{}, []schemas.SFTExample{heldOut}, ShareGPTOptions{AllowHeldOut: true}); err != nil {
		t.Errorf("AllowHeldOut: %v", err)
	}
}

func TestDatasetInfo(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteDatasetInfo(&buf, "mlerl_sft", "sft.sharegpt.jsonl"); err != nil {
		t.Fatal(err)
	}
	var got map[string]map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("dataset_info.json is not JSON: %v", err)
	}
	want := map[string]map[string]any{"mlerl_sft": {
		"file_name":  "sft.sharegpt.jsonl",
		"formatting": "sharegpt",
		"columns":    map[string]any{"messages": "conversations"},
		"tags": map[string]any{
			"role_tag": "from", "content_tag": "value", "user_tag": "human",
			"assistant_tag": "gpt", "system_tag": "system",
		},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("dataset_info.json = %v\nwant %v", got, want)
	}
	if err := WriteDatasetInfo(&buf, "", "x.jsonl"); err == nil {
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
		DataSource:  "mlerl",
		Prompt:      []ChatMessage{{Role: "user", Content: "Research Problem: digits\nStep 2."}},
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
	compact, err := Verl(rlRows()[1], 0, VerlOptions{Compact: true, System: "sys"})
	if err != nil {
		t.Fatal(err)
	}
	wantMsgs := []ChatMessage{{Role: "system", Content: "sys"}, {Role: "user", Content: "compact 1"}}
	if !reflect.DeepEqual(compact.Prompt, wantMsgs) || compact.DataSource != "mlerl" {
		t.Errorf("compact prompt = %+v, data_source %q, want %+v and the default data_source", compact.Prompt, compact.DataSource, wantMsgs)
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
		{"no prompt", edit(func(s *schemas.RLState) { s.FullPrompt = "" }), "full_prompt"},
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
// verl's datasets loader) would: the nested columns must be list<struct>
// and structs with the documented fields.
func TestVerlReadBackArrow(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteVerl(&buf, rlRows(), DefaultVerlOptions()); err != nil {
		t.Fatal(err)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	pr, err := file.NewParquetReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	// Only encodings every Parquet reader knows (no delta encodings).
	rg := pr.MetaData().RowGroup(0)
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
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{}, mem)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()

	str := func(fields ...string) []string { return fields }
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
	if names := str(sch.Field(0).Name, sch.Field(1).Name, sch.Field(2).Name, sch.Field(3).Name, sch.Field(4).Name); !reflect.DeepEqual(names, str("data_source", "prompt", "ability", "reward_model", "extra_info")) {
		t.Fatalf("columns = %v", names)
	}
	for _, c := range []int{0, 2} {
		if id := sch.Field(c).Type.ID(); id != arrow.STRING {
			t.Errorf("column %s is %s, want string", sch.Field(c).Name, sch.Field(c).Type)
		}
	}
	lt, ok := sch.Field(1).Type.(*arrow.ListType)
	if !ok {
		t.Fatalf("prompt is %s, want list<struct<role, content>>", sch.Field(1).Type)
	}
	if err := wantStruct(lt.Elem(), str("role", "content"), arrow.STRING, arrow.STRING); err != nil {
		t.Errorf("prompt element: %v", err)
	}
	if err := wantStruct(sch.Field(3).Type, str("style", "ground_truth"), arrow.STRING, arrow.STRING); err != nil {
		t.Errorf("reward_model: %v", err)
	}
	if err := wantStruct(sch.Field(4).Type, str("state_id", "task_id", "split", "index", "trajectory_id", "step_index"),
		arrow.STRING, arrow.STRING, arrow.STRING, arrow.INT64, arrow.STRING, arrow.INT64); err != nil {
		t.Errorf("extra_info: %v", err)
	}
	if tbl.NumRows() != 2 {
		t.Fatalf("%d rows, want 2", tbl.NumRows())
	}

	// Values, through Arrow's arrays.
	want := wantVerl(DefaultVerlOptions())
	col := func(i int) arrow.Array {
		ch := tbl.Column(i).Data().Chunks()
		if len(ch) != 1 {
			t.Fatalf("column %d: %d chunks, want 1", i, len(ch))
		}
		return ch[0]
	}
	ds := col(0).(*array.String)
	prompts := col(1).(*array.List)
	elems := prompts.ListValues().(*array.Struct)
	rm := col(3).(*array.Struct)
	ei := col(4).(*array.Struct)
	for r := range 2 {
		if got := ds.Value(r); got != want[r].DataSource {
			t.Errorf("row %d data_source = %q, want %q", r, got, want[r].DataSource)
		}
		start, end := prompts.ValueOffsets(r)
		var msgs []ChatMessage
		for k := start; k < end; k++ {
			msgs = append(msgs, ChatMessage{
				Role:    elems.Field(0).(*array.String).Value(int(k)),
				Content: elems.Field(1).(*array.String).Value(int(k)),
			})
		}
		if !reflect.DeepEqual(msgs, want[r].Prompt) {
			t.Errorf("row %d prompt = %+v, want %+v", r, msgs, want[r].Prompt)
		}
		if got := rm.Field(1).(*array.String).Value(r); got != want[r].RewardModel.GroundTruth {
			t.Errorf("row %d reward_model.ground_truth = %q, want %q", r, got, want[r].RewardModel.GroundTruth)
		}
		if got := ei.Field(0).(*array.String).Value(r); got != want[r].ExtraInfo.StateID {
			t.Errorf("row %d extra_info.state_id = %q, want %q", r, got, want[r].ExtraInfo.StateID)
		}
		if got := ei.Field(3).(*array.Int64).Value(r); got != int64(r) {
			t.Errorf("row %d extra_info.index = %d, want %d", r, got, r)
		}
	}
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
		FullPrompt: "Research Problem: improve accuracy.",
		Response:   "Action: Execute Script\nAction Input: {\"script_name\": \"train.py\"}",
	}}
	if err := WriteShareGPT(os.Stdout, rows, DefaultShareGPTOptions()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {"conversations":[{"from":"human","value":"Research Problem: improve accuracy."},{"from":"gpt","value":"Action: Execute Script\nAction Input: {\"script_name\": \"train.py\"}"}]}
}
