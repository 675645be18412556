package schemas

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

func TestCheck(t *testing.T) {
	info := Info{Name: "steps", Version: "1.3"}
	cases := []struct {
		name, file, version string
		wantErr             string // substring; "" means accepted
	}{
		{"same", "steps", "1.3", ""},
		{"older minor", "steps", "1.0", ""},
		{"newer minor", "steps", "1.9", ""},
		{"major only", "steps", "1", ""},
		{"newer major", "steps", "2.0", "version 2.0 is not readable by this mlerl (knows 1.3)"},
		{"older major", "steps", "0.4", "version 0.4 is not readable"},
		{"other schema", "tasks", "1.0", `schema "tasks" found, "steps" expected`},
		{"no schema", "", "", "not written by mlerl"},
		{"no version", "steps", "", `version "" is not major.minor`},
		{"garbage version", "steps", "x.1", `version "x.1" is not major.minor`},
		{"garbage minor", "steps", "1.y", `version "1.y" is not major.minor`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := info.Check(c.file, c.version)
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("got %v want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.Is(err, ErrVersion) {
				t.Fatalf("got %v want an ErrVersion containing %q", err, c.wantErr)
			}
		})
	}
}

// TestSchemasAreWellFormed checks every Info: unique names, a major.minor
// version, a struct row whose every field has an explicit snake_case
// Parquet column name, and a Parquet schema parquet-go can derive.
func TestSchemasAreWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, info := range All() {
		t.Run(info.Name, func(t *testing.T) {
			if seen[info.Name] {
				t.Errorf("duplicate schema name %s", info.Name)
			}
			seen[info.Name] = true
			if err := info.Check(info.Name, info.Version); err != nil {
				t.Errorf("own version refused: %v", err)
			}
			if got, ok := ByName(info.Name); !ok || got.Name != info.Name {
				t.Errorf("ByName(%q): got %v, %v", info.Name, got.Name, ok)
			}
			if info.Doc == "" {
				t.Errorf("no Doc")
			}
			checkTags(t, reflect.TypeOf(info.Row))
			s := parquet.SchemaOf(info.Row)
			if len(s.Fields()) != reflect.TypeOf(info.Row).NumField() {
				t.Errorf("parquet schema has %d columns, struct %d fields", len(s.Fields()), reflect.TypeOf(info.Row).NumField())
			}
		})
	}
	if _, ok := ByName("nope"); ok {
		t.Errorf("ByName(nope) found a schema")
	}
}

func checkTags(t *testing.T, typ reflect.Type) {
	t.Helper()
	if typ.Kind() != reflect.Struct {
		t.Fatalf("row type %v is not a struct", typ)
	}
	cols := map[string]bool{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := strings.Split(f.Tag.Get("parquet"), ",")[0]
		if name == "" || name != strings.ToLower(name) || strings.ContainsAny(name, " -.") {
			t.Errorf("%s.%s: parquet column name %q: want explicit snake_case", typ.Name(), f.Name, name)
		}
		if cols[name] {
			t.Errorf("%s: duplicate column %s", typ.Name(), name)
		}
		cols[name] = true
		if f.Type.Kind() == reflect.Pointer && !strings.Contains(f.Tag.Get("parquet"), "optional") {
			t.Errorf("%s.%s is a pointer without ,optional", typ.Name(), f.Name)
		}
		if f.Type.Kind() == reflect.Slice && !strings.Contains(f.Tag.Get("parquet"), "list") {
			t.Errorf("%s.%s is a slice without ,list (Arrow would see a repeated field, not a list)", typ.Name(), f.Name)
		}
		if e := f.Type; e.Kind() == reflect.Slice && e.Elem().Kind() == reflect.Struct {
			checkTags(t, e.Elem())
		}
	}
}
