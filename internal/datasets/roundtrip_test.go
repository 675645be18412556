package datasets_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// TestRoundTripEverySchema writes rows of every schema with every field set
// (optional values both null and not, lists empty and not, nested reward
// terms) and reads them back with parquet-go and with Arrow's pqarrow,
// comparing column by column.
func TestRoundTripEverySchema(t *testing.T) {
	cases := map[string]func(t *testing.T, info schemas.Info){
		schemas.Tasks.Name:        roundTrip[schemas.Task],
		schemas.Ideas.Name:        roundTrip[schemas.Idea],
		schemas.Trajectories.Name: roundTrip[schemas.Trajectory],
		schemas.Steps.Name:        roundTrip[schemas.Step],
		schemas.SFTExamples.Name:  roundTrip[schemas.SFTExample],
		schemas.RLStates.Name:     roundTrip[schemas.RLState],
		schemas.EvalResults.Name:  roundTrip[schemas.EvalResult],
		schemas.Experiments.Name:  roundTrip[schemas.ExperimentRow],
	}
	for _, info := range schemas.All() {
		run, ok := cases[info.Name]
		if !ok {
			t.Errorf("schema %s has no round-trip case: add it to this table", info.Name)
			continue
		}
		t.Run(info.Name, func(t *testing.T) { run(t, info) })
	}
}

func roundTrip[T any](t *testing.T, info schemas.Info) {
	if reflect.TypeOf(info.Row) != reflect.TypeFor[T]() {
		t.Fatalf("schema %s: Row is %T, test uses %v", info.Name, info.Row, reflect.TypeFor[T]())
	}
	ctx := context.Background()
	st := store.NewLocal(t.TempDir())
	// Row i: i%2==0 has every optional value set and non-empty lists; odd
	// rows have nulls and empty lists. Two parts, to cross file boundaries.
	var want []T
	for i := range 6 {
		var row T
		fill(reflect.ValueOf(&row).Elem(), i, i%2 == 0)
		want = append(want, row)
	}
	p, err := datasets.Begin(ctx, st, info.Name, info, "rt")
	if err != nil {
		t.Fatal(err)
	}
	if err := datasets.WritePart(ctx, p, "part-00000.parquet", want[:4]); err != nil {
		t.Fatal(err)
	}
	if err := datasets.WritePart(ctx, p, "part-00001.parquet", want[4:]); err != nil {
		t.Fatal(err)
	}
	m, err := p.Commit(ctx, datasets.CommitOptions{Producer: datasets.Producer{Command: "test"}})
	if err != nil {
		t.Fatal(err)
	}
	if m.Rows != int64(len(want)) {
		t.Errorf("manifest rows: got %d want %d", m.Rows, len(want))
	}

	// parquet-go, typed.
	got, err := datasets.ReadAll[T](ctx, st, m, info)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("parquet-go rows: got %d want %d", len(got), len(want))
	}
	for i := range want {
		compareColumns(t, fmt.Sprintf("parquet-go row %d", i), goColumns(reflect.ValueOf(got[i])), goColumns(reflect.ValueOf(want[i])))
	}

	// Arrow, columnar.
	// Not a checked allocator: Arrow v17's delta-bit-packing decoder
	// keeps 64 bytes per column chunk that it never releases.
	mem := memory.NewGoAllocator()
	row := 0
	err = datasets.EachRecord(ctx, st, m, info, mem, func(rec arrow.Record) error {
		checkArrowTypes(t, info, rec.Schema())
		for r := 0; r < int(rec.NumRows()); r++ {
			if row >= len(want) {
				return fmt.Errorf("arrow: more rows than written")
			}
			gotCols := map[string]any{}
			for c, f := range rec.Schema().Fields() {
				gotCols[f.Name] = arrowValue(rec.Column(c), r)
			}
			// The documented convention for non-pointer optional columns.
			rt := reflect.TypeFor[T]()
			for i := range rt.NumField() {
				name := strings.Split(rt.Field(i).Tag.Get("parquet"), ",")[0]
				if zeroIsNull(rt.Field(i)) && gotCols[name] == nil {
					gotCols[name] = goValue(reflect.Zero(rt.Field(i).Type))
				}
			}
			compareColumns(t, fmt.Sprintf("arrow row %d", row), gotCols, goColumns(reflect.ValueOf(want[row])))
			row++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if row != len(want) {
		t.Errorf("arrow rows: got %d want %d", row, len(want))
	}
}

// fill sets every field of v to a value derived from seed; pointers are set
// when full, otherwise left nil; slices get 3 elements when full, else none.
func fill(v reflect.Value, seed int, full bool) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("%s-%d «ü\n»", strings.ToLower(v.Type().Name()), seed))
	case reflect.Bool:
		v.SetBool(seed%3 != 1)
	case reflect.Int32, reflect.Int64, reflect.Int:
		v.SetInt(int64(seed*1000 + 7))
		if seed%3 == 2 {
			v.SetInt(-int64(seed) - 1<<30)
		}
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(seed) + 0.25)
		if seed%3 == 2 {
			v.SetFloat(-1e-3 * float64(seed+1))
		}
	case reflect.Pointer:
		if full {
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem(), seed+11, full)
		}
	case reflect.Slice:
		if full {
			s := reflect.MakeSlice(v.Type(), 3, 3)
			for i := range 3 {
				fill(s.Index(i), seed*10+i, full)
			}
			v.Set(s)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			// Each field gets its own seed so swapped columns show up.
			fill(v.Field(i), seed*31+i, full)
			if !full && zeroIsNull(v.Type().Field(i)) {
				v.Field(i).SetZero()
			}
		}
	default:
		panic("fill: unsupported kind " + v.Kind().String())
	}
}

// zeroIsNull reports a non-pointer optional column: parquet-go stores its
// zero value as null (Arrow reads null, parquet-go reads the zero value).
func zeroIsNull(f reflect.StructField) bool {
	return f.Type.Kind() != reflect.Pointer && strings.Contains(f.Tag.Get("parquet"), ",optional")
}

// goColumns flattens a row to {column: value} with the value model that
// arrowValue uses: nil pointers are nil, slices are []any (empty, not
// nil), structs are map[string]any keyed by Parquet column name.
func goColumns(v reflect.Value) map[string]any {
	out := map[string]any{}
	t := v.Type()
	for i := range t.NumField() {
		name := strings.Split(t.Field(i).Tag.Get("parquet"), ",")[0]
		out[name] = goValue(v.Field(i))
	}
	return out
}

func goValue(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return nil
		}
		return goValue(v.Elem())
	case reflect.Slice:
		s := []any{}
		for i := range v.Len() {
			s = append(s, goValue(v.Index(i)))
		}
		return s
	case reflect.Struct:
		return goColumns(v)
	case reflect.Int, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Float32:
		return float32(v.Float())
	}
	return v.Interface()
}

func arrowValue(a arrow.Array, i int) any {
	if a.IsNull(i) {
		return nil
	}
	switch a := a.(type) {
	case *array.String:
		return a.Value(i)
	case *array.Binary:
		return string(a.Value(i))
	case *array.Boolean:
		return a.Value(i)
	case *array.Int32:
		return int64(a.Value(i))
	case *array.Int64:
		return a.Value(i)
	case *array.Float32:
		return a.Value(i)
	case *array.Float64:
		return a.Value(i)
	case *array.List:
		start, end := a.ValueOffsets(i)
		s := []any{}
		for j := start; j < end; j++ {
			s = append(s, arrowValue(a.ListValues(), int(j)))
		}
		return s
	case *array.Struct:
		m := map[string]any{}
		st := a.DataType().(*arrow.StructType)
		for f := range st.NumFields() {
			m[st.Field(f).Name] = arrowValue(a.Field(f), i)
		}
		return m
	}
	return fmt.Sprintf("<unhandled arrow type %s>", a.DataType())
}

func compareColumns(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s: column %s missing", what, name)
			continue
		}
		if !equalValues(g, w) {
			t.Errorf("%s: column %s: got %#v want %#v", what, name, g, w)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: unexpected column %s", what, name)
		}
	}
}

func equalValues(a, b any) bool {
	if x, ok := a.(float64); ok {
		y, ok := b.(float64)
		return ok && (x == y || math.IsNaN(x) && math.IsNaN(y))
	}
	return reflect.DeepEqual(a, b)
}

// checkArrowTypes checks the Arrow types the trainer relies on.
func checkArrowTypes(t *testing.T, info schemas.Info, s *arrow.Schema) {
	t.Helper()
	want := map[string]map[string]string{
		schemas.Ideas.Name: {"embedding": "list<float32>", "kept": "bool", "rank": "int32"},
		schemas.Steps.Name: {
			"reward_terms":  "list<struct<name: utf8, value: float64>>",
			"markers":       "list<utf8>",
			"metric_before": "float64",
			"step_index":    "int32",
			"state":         "utf8",
		},
	}[info.Name]
	for col, typ := range want {
		fs, ok := s.FieldsByName(col)
		if !ok {
			t.Errorf("arrow schema of %s has no column %s", info.Name, col)
			continue
		}
		if got := typeName(fs[0].Type); got != typ {
			t.Errorf("arrow type of %s.%s: got %s want %s", info.Name, col, got, typ)
		}
	}
}

// typeName is the type's string without the list element's field name,
// which Arrow takes from the Parquet file's group names.
func typeName(t arrow.DataType) string {
	if l, ok := t.(*arrow.ListType); ok {
		return "list<" + typeName(l.Elem()) + ">"
	}
	return t.String()
}
