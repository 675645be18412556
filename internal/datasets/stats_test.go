package datasets

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// longSteps returns steps rows whose text columns hold kilobytes (like a
// rollout's prompts and observations) and whose ids are short.
func longSteps(n int) []schemas.Step {
	rows := make([]schemas.Step, n)
	for i := range rows {
		text := func(what string) string {
			return strings.Repeat(fmt.Sprintf("%s of step %d: the script printed a line. ", what, i), 60)
		}
		reward := float64(i) / 10
		rows[i] = schemas.Step{
			TaskID: fmt.Sprintf("task-%c", 'a'+i%2), TrajectoryID: "traj-0001", StepIndex: int32(i),
			State: text("state"), CompactState: text("compact state"), Plan: []string{text("plan")},
			ActionText: text("action"), ActionName: "Execute Script", ActionInput: `{"script_name": "train.py"}`,
			Observation: text("observation"), Outcome: "success", MetricAfter: &reward, Reward: reward,
			SnapshotRef: "sha256:" + strings.Repeat(fmt.Sprint(i%10), 64),
		}
	}
	return rows
}

// writeSteps writes rows as one committed part and returns its bytes.
func writeSteps(t *testing.T, rows []schemas.Step) []byte {
	t.Helper()
	ctx := context.Background()
	st := store.NewLocal(t.TempDir())
	p, err := Begin(ctx, st, schemas.Steps.Name, schemas.Steps, "stats")
	if err != nil {
		t.Fatal(err)
	}
	if err := WritePart(ctx, p, "part-0.parquet", rows); err != nil {
		t.Fatal(err)
	}
	m, err := p.Commit(ctx, CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadAll[schemas.Step](ctx, st, m, schemas.Steps)
	if err != nil || len(got) != len(rows) || got[len(got)-1].Observation != rows[len(rows)-1].Observation {
		t.Fatalf("read back %d rows, %v; want %d equal rows", len(got), err, len(rows))
	}
	b, err := store.ReadAll(ctx, st, Dir(m.Name, m.Version)+"/part-0.parquet")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTextColumnStatistics: a steps file's footer keeps exact min/max for
// short string columns and numbers, none for long text (the null count
// stays); no page header carries statistics for a string column; the
// column index still bounds every page.
func TestTextColumnStatistics(t *testing.T) {
	rows := longSteps(40)
	b := writeSteps(t, rows)
	footer := binary.LittleEndian.Uint32(b[len(b)-8:])
	t.Logf("%d rows: file %d bytes, footer %d bytes", len(rows), len(b), footer)
	pf, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	type bounds struct{ min, max string }
	want := map[string]*bounds{ // nil: no min and max
		"task_id": {"task-a", "task-b"}, "trajectory_id": {"traj-0001", "traj-0001"},
		"action_name": {"Execute Script", "Execute Script"}, "outcome": {"success", "success"},
		"action_input":   {`{"script_name": "train.py"}`, `{"script_name": "train.py"}`},
		"snapshot_ref":   {"sha256:" + strings.Repeat("0", 64), "sha256:" + strings.Repeat("9", 64)},
		"snapshot_after": {"", ""},
		"state":          nil, "compact_state": nil, "action_text": nil, "observation": nil, "plan.list.element": nil,
		// Empty in every row: no values, no bounds.
		"markers.list.element": nil, "reward_terms.list.element.name": nil,
	}
	md := pf.Metadata()
	for _, c := range md.RowGroups[0].Columns {
		m := c.MetaData
		name := strings.Join(m.PathInSchema, ".")
		s := m.Statistics
		if m.Type != format.ByteArray {
			if name == "step_index" && (binary.LittleEndian.Uint32(s.MinValue) != 0 || binary.LittleEndian.Uint32(s.MaxValue) != uint32(len(rows)-1)) {
				t.Errorf("step_index: got min %v max %v want 0 and %d", s.MinValue, s.MaxValue, len(rows)-1)
			}
			continue
		}
		w, ok := want[name]
		if !ok {
			t.Errorf("%s: a string column the test does not know: add it", name)
			continue
		}
		if s.Min != nil || s.Max != nil {
			t.Errorf("%s: deprecated min/max written", name)
		}
		switch {
		case w == nil && (s.MinValue != nil || s.MaxValue != nil):
			t.Errorf("%s: got min %d bytes, max %d bytes want none", name, len(s.MinValue), len(s.MaxValue))
		case w != nil && (string(s.MinValue) != w.min || string(s.MaxValue) != w.max):
			t.Errorf("%s: got min %q max %q want %q %q", name, s.MinValue, s.MaxValue, w.min, w.max)
		}
	}
	// Page headers: no statistics for string columns, numbers keep theirs.
	schema := pf.Schema()
	for j, oi := range pf.OffsetIndexes() {
		path := schema.Columns()[j]
		leaf, _ := schema.Lookup(path...)
		for _, loc := range oi.PageLocations {
			var h format.PageHeader
			if err := thrift.NewDecoder(new(thrift.CompactProtocol).NewReader(bytes.NewReader(b[loc.Offset:]))).Decode(&h); err != nil {
				t.Fatal(err)
			}
			s := h.DataPageHeaderV2.V.Statistics
			if !h.DataPageHeaderV2.Valid {
				s = h.DataPageHeader.V.Statistics
			}
			if leaf.Node.Type().Kind() == parquet.ByteArray && (s.MinValue != nil || s.MaxValue != nil || s.Min != nil || s.Max != nil) {
				t.Errorf("%s: a page header carries statistics (%d+%d bytes)", strings.Join(path, "."), len(s.MinValue), len(s.MaxValue))
			}
		}
	}
	// The column index bounds every page of a long column (truncated).
	obs, _ := schema.Lookup("observation")
	ci := pf.ColumnIndexes()[obs.ColumnIndex]
	for i := range ci.MinValues {
		if ci.NullPages[i] || len(ci.MinValues[i]) == 0 || len(ci.MaxValues[i]) == 0 || len(ci.MaxValues[i]) > 16 {
			t.Errorf("observation page %d: column index min %q max %q, want non-empty bounds of at most 16 bytes", i, ci.MinValues[i], ci.MaxValues[i])
		}
	}
	if footer > 4096 {
		t.Errorf("footer of %d bytes for %d rows, want at most 4 KiB", footer, len(rows))
	}
}

// TestFullStatisticsStillRead: files written before (full statistics everywhere)
// read as before.
func TestFullStatisticsStillRead(t *testing.T) {
	ctx := context.Background()
	st := store.NewLocal(t.TempDir())
	p, err := Begin(ctx, st, schemas.Steps.Name, schemas.Steps, "old")
	if err != nil {
		t.Fatal(err)
	}
	rows := longSteps(5)
	w, err := st.Create(ctx, p.Dir()+"/part-0.parquet", store.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The writer's options before statistics were trimmed.
	pw := parquet.NewGenericWriter[schemas.Step](w, parquet.Compression(&parquet.Zstd),
		parquet.KeyValueMetadata(schemas.MetaSchema, schemas.Steps.Name), parquet.KeyValueMetadata(schemas.MetaVersion, schemas.Steps.Version))
	if _, err := pw.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := p.Commit(ctx, CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadAll[schemas.Step](ctx, st, m, schemas.Steps)
	if err != nil || len(got) != 5 || got[4].Observation != rows[4].Observation {
		t.Fatalf("got %d rows, %v", len(got), err)
	}
	if err := Verify(ctx, st, m); err != nil {
		t.Fatal(err)
	}
}

func TestFooterTrimmerErrors(t *testing.T) {
	cases := []struct {
		name string
		tail []byte
		want string
	}{
		{"nothing", []byte("abc"), "parquet writer closed without a footer (3 bytes at close)"},
		{"length past the start", append(binary.LittleEndian.AppendUint32([]byte("xy"), 99), "PAR1"...), "parquet footer of 99 bytes, but only 2 bytes were written at close"},
	}
	for _, c := range cases {
		var out bytes.Buffer
		f := &footerTrimmer{w: &out, closing: true}
		f.Write(c.tail)
		if err := f.finish(); err == nil || err.Error() != c.want {
			t.Errorf("%s: got %v want %q", c.name, err, c.want)
		}
	}
}
