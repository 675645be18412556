// Package config loads a stage's Config: defaults, then a YAML file, then
// command-line flags, in that order. Unknown YAML keys are rejected with
// their name. Every field of a Config struct becomes a flag named after its
// yaml tag (nested structs join names with a dot: "llm.base_url"), with the
// help text from its `help` tag, so a field is documented exactly once;
// the flag also takes its kebab-case spelling ("--llm.base-url").
//
// A config checks itself in one Validate method, called by Resolve before
// the stage opens anything; a bad value is a [FieldError] naming its
// dotted key, and Resolve adds where the value came from (the flag as
// typed, or the file and line). Errors in the file itself (syntax, types,
// unknown or repeated keys) name the file, the line and the key.
//
// A string field tagged `path:"from-config"` holds a local path that a
// config file gives relative to its own folder: `data: ../data` in
// runs/a.yaml means runs/../data wherever the command runs from, so a
// committed config works from any checkout ([FromConfig]). A flag's
// value is taken as typed (relative to the working directory), and wins.
//
// Start with [Bind] (in the command's setup) and [Resolve] (when it runs).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// Validator is implemented by configs that check themselves after loading.
type Validator interface {
	Validate() error
}

// Deriver is implemented by configs that compute derived fields after
// loading (in one place, before validation).
type Deriver interface {
	Derive()
}

var durationType = reflect.TypeOf(time.Duration(0))

// Bind registers one flag per field of *cfg on fs, with cfg's current
// values as defaults. A name with an underscore also gets a hidden
// kebab-case alias (--llm.base-url for --llm.base_url).
func Bind(fs *pflag.FlagSet, cfg any) {
	walk(reflect.ValueOf(cfg).Elem(), "", func(name string, tag reflect.StructTag, v reflect.Value) {
		p := v.Addr().Interface()
		help := tag.Get("help")
		switch ptr := p.(type) {
		case *string:
			fs.StringVar(ptr, name, *ptr, help)
		case *bool:
			fs.BoolVar(ptr, name, *ptr, help)
		case *int:
			fs.IntVar(ptr, name, *ptr, help)
		case *int64:
			fs.Int64Var(ptr, name, *ptr, help)
		case *float64:
			fs.Float64Var(ptr, name, *ptr, help)
		case *int32:
			fs.Int32Var(ptr, name, *ptr, help)
		case *float32:
			fs.Float32Var(ptr, name, *ptr, help)
		case *time.Duration:
			fs.DurationVar(ptr, name, *ptr, help)
		case *[]string:
			fs.StringSliceVar(ptr, name, *ptr, help)
		case *[]int:
			fs.IntSliceVar(ptr, name, *ptr, help)
		case *[]float64:
			fs.Float64SliceVar(ptr, name, *ptr, help)
		default:
			// A programming error in a Config type, found by the first
			// test that builds the command.
			panic(fmt.Sprintf("config: field %s has unsupported type %s (use string, bool, int, int32, int64, float32, float64, time.Duration, []string, []int or []float64)", name, v.Type()))
		}
		// The kebab-case alias (--per-task for --per_task), hidden from
		// the help: it shares the flag's value, and Resolve looks at both.
		if k := kebab(name); k != name && fs.Lookup(k) == nil {
			alias := *fs.Lookup(name)
			alias.Name, alias.Shorthand, alias.Hidden, alias.Changed = k, "", true, false
			fs.AddFlag(&alias)
		}
	})
}

// walk visits every leaf field with its flag name and struct tag.
func walk(v reflect.Value, prefix string, fn func(name string, tag reflect.StructTag, v reflect.Value)) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		parts := strings.Split(f.Tag.Get("yaml"), ",")
		tag := parts[0]
		inline := slices.Contains(parts[1:], "inline") && f.Type.Kind() == reflect.Struct
		if (!f.IsExported() && !(inline && f.Anonymous)) || tag == "-" {
			continue
		}
		fv := v.Field(i)
		if inline {
			walk(fv, prefix, fn)
			continue
		}
		if tag == "" {
			tag = strings.ToLower(f.Name)
		}
		name := prefix + tag
		if f.Type.Kind() == reflect.Struct && f.Type != durationType {
			walk(fv, name+".", fn)
			continue
		}
		fn(name, f.Tag, fv)
	}
}

// LoadFile decodes a YAML file into cfg (which holds the defaults),
// rejecting keys that cfg does not have: the error names the file, the
// line and the full dotted key ("llm.base_ulr"), and lists the valid keys
// at that level. A value of the wrong type is a *[FieldError] with the
// file, line and key; a syntax error names the line at fault. An empty
// file changes nothing. A relative path in a field tagged
// path:"from-config" is resolved against the file's folder ([FromConfig]).
func LoadFile(path string, cfg any) error {
	_, err := loadFile(path, cfg)
	return err
}

// loadFile is LoadFile returning the line of every key it set.
func loadFile(path string, cfg any) (map[string]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, syntaxError(path, b, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("config %s line %d: want a mapping of key: value, got a %s", path, root.Line, kindName(root.Kind))
	}
	lines := map[string]int{}
	if err := decodeMapping(root, reflect.ValueOf(cfg).Elem(), "", lines); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			fe.File = path
			return nil, fe
		}
		return nil, fmt.Errorf("config %s %w", path, err)
	}
	// Paths the file gives relative to its folder (fields tagged
	// path:"from-config"), now that the file is known to be valid.
	walk(reflect.ValueOf(cfg).Elem(), "", func(name string, tag reflect.StructTag, v reflect.Value) {
		if _, set := lines[name]; set && tag.Get("path") == "from-config" && v.Kind() == reflect.String {
			v.SetString(FromConfig(path, v.String()))
		}
	})
	return lines, nil
}

// FromConfig resolves a local path p that the config file at path gives
// relative to its own folder: an absolute path, a URL (gs://bucket/x,
// file:///x) and "" are returned as they are; a relative one is joined to
// the file's folder and made absolute, so that the value does not depend
// on the folder the command runs from (a grid's identity includes its
// data root: the same config must resume the same grid from anywhere).
func FromConfig(path, p string) string {
	if p == "" || filepath.IsAbs(p) || strings.Contains(p, "://") {
		return p
	}
	joined := filepath.Join(filepath.Dir(path), p)
	if abs, err := filepath.Abs(joined); err == nil {
		return abs
	}
	return joined
}

// decodeMapping sets the fields of struct v from the mapping n, key by
// key, so that an error names the dotted key and its line: an unknown or
// repeated key, or a value of the wrong type (a *FieldError). lines
// records the line of each leaf key set.
func decodeMapping(n *yaml.Node, v reflect.Value, prefix string, lines map[string]int) error {
	fields := map[string]reflect.Value{}
	var names []string
	walkValues(v, func(name string, fv reflect.Value) {
		fields[name] = fv
		names = append(names, name)
	})
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: a key must be a plain name, got a %s", k.Line, kindName(k.Kind))
		}
		key := prefix + k.Value
		fv, ok := fields[k.Value]
		if !ok {
			hint := ""
			if snake := strings.ReplaceAll(k.Value, "-", "_"); snake != k.Value && fields[snake].IsValid() {
				hint = fmt.Sprintf("; YAML keys are snake_case: %s", prefix+snake)
			}
			return fmt.Errorf("line %d: unknown key %q (valid keys%s: %s%s; see --print-config)", k.Line, key, under(prefix), strings.Join(names, ", "), hint)
		}
		if first, dup := seen[k.Value]; dup {
			return fmt.Errorf("line %d: key %q is set twice (first on line %d)", k.Line, key, first)
		}
		seen[k.Value] = k.Line
		for val.Kind == yaml.AliasNode && val.Alias != nil {
			val = val.Alias
		}
		if fv.Kind() == reflect.Struct && fv.Type() != durationType {
			switch {
			case val.Kind == yaml.MappingNode:
				if err := decodeMapping(val, fv, key+".", lines); err != nil {
					return err
				}
			case val.Kind == yaml.ScalarNode && val.Tag == "!!null":
				// "env:" with nothing under it: keep the defaults.
			default:
				return &FieldError{Key: key, Msg: fmt.Sprintf("want a mapping of key: value, got a %s", kindName(val.Kind)), Line: k.Line}
			}
			continue
		}
		lines[key] = k.Line
		if err := decodeLeaf(val, fv); err != nil {
			fe := &FieldError{Key: key, Msg: err.Error(), Line: k.Line}
			if val.Kind == yaml.ScalarNode && val.Tag != "!!null" {
				fe.Value = val.Value
			}
			return fe
		}
	}
	return nil
}

// decodeLeaf sets one field from a YAML value. A null value empties a
// string or a list and is an error for anything else (leave the key out
// to keep the default).
func decodeLeaf(val *yaml.Node, fv reflect.Value) error {
	want := "want " + typeName(fv.Type())
	if val.Kind == yaml.ScalarNode && val.Tag == "!!null" {
		switch fv.Kind() {
		case reflect.String, reflect.Slice:
			fv.Set(reflect.Zero(fv.Type()))
			return nil
		}
		return errors.New("no value: " + want + " (leave the key out to keep the default)")
	}
	if fv.Kind() == reflect.Slice && val.Kind != yaml.SequenceNode {
		return fmt.Errorf("%s, got a %s", want, kindName(val.Kind))
	}
	if fv.Kind() != reflect.Slice && val.Kind != yaml.ScalarNode {
		return fmt.Errorf("%s, got a %s", want, kindName(val.Kind))
	}
	if !integral(val, fv.Type()) {
		return errors.New(want) // yaml.v3 would truncate 2.5 to 2
	}
	// Decode into a fresh value so that a failure changes nothing.
	p := reflect.New(fv.Type())
	if err := val.Decode(p.Interface()); err != nil {
		return errors.New(want)
	}
	fv.Set(p.Elem())
	return nil
}

// integral reports whether val holds integers where t wants them.
func integral(val *yaml.Node, t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64:
		return t == durationType || val.ShortTag() == "!!int"
	case reflect.Slice:
		for _, c := range val.Content {
			if !integral(c, t.Elem()) {
				return false
			}
		}
	}
	return true
}

// typeName says what a field of type t takes, for messages.
func typeName(t reflect.Type) string {
	if t == durationType {
		return "a duration such as 90s, 30m or 1h30m"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Int32:
		return "a 32-bit integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "a list of " + strings.TrimPrefix(strings.TrimPrefix(typeName(t.Elem()), "a "), "an ") + "s"
	}
	return t.String()
}

func under(prefix string) string {
	if prefix == "" {
		return ""
	}
	return " under " + strings.TrimSuffix(prefix, ".")
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	case yaml.ScalarNode:
		return "single value"
	}
	return "non-mapping"
}

// Resolve builds the final config: defaults(), then the YAML file (if
// path is not empty), then every flag the user set on fs (under its
// snake_case name or its kebab-case alias). It derives and validates the
// result; a *[FieldError] from Validate says which flag, or which line of
// the file, set the bad value.
func Resolve[T any](fs *pflag.FlagSet, path string, defaults func() T) (T, error) {
	cfg := defaults()
	var lines map[string]int
	if path != "" {
		var err error
		if lines, err = loadFile(path, &cfg); err != nil {
			return cfg, err
		}
	}
	var ferr error
	typed := map[string]string{} // key -> the flag as the user typed it
	walk(reflect.ValueOf(&cfg).Elem(), "", func(name string, _ reflect.StructTag, v reflect.Value) {
		fl := fs.Lookup(name)
		if fl == nil || ferr != nil {
			return
		}
		switch alias := fs.Lookup(kebab(name)); {
		case alias != nil && alias != fl && alias.Changed:
			typed[name] = "--" + alias.Name
		case fl.Changed:
			typed[name] = "--" + name
		default:
			return
		}
		var err error
		if sv, ok := fl.Value.(pflag.SliceValue); ok && v.Kind() == reflect.Slice {
			err = setSlice(v, sv.GetSlice())
		} else {
			err = setFromString(v, fl.Value.String())
		}
		if err != nil {
			ferr = fmt.Errorf("flag %s: %w", typed[name], err)
		}
	})
	if ferr != nil {
		return cfg, ferr
	}
	if d, ok := any(&cfg).(Deriver); ok {
		d.Derive()
	}
	if v, ok := any(&cfg).(Validator); ok {
		if err := v.Validate(); err != nil {
			var fe *FieldError
			if errors.As(err, &fe) {
				c := *fe
				if f, ok := typed[c.Key]; ok {
					c.Flag = f
				} else if line, ok := lines[c.Key]; ok {
					c.File, c.Line = path, line
				}
				return cfg, &c
			}
			if path != "" {
				return cfg, fmt.Errorf("config %s: %w", path, err)
			}
			return cfg, fmt.Errorf("config: %w", err)
		}
	}
	return cfg, nil
}

// kebab is the kebab-case spelling of a flag name: llm.base_url ->
// llm.base-url.
func kebab(name string) string { return strings.ReplaceAll(name, "_", "-") }

// setSlice parses each element into a new slice for v.
func setSlice(v reflect.Value, elems []string) error {
	out := reflect.MakeSlice(v.Type(), len(elems), len(elems))
	for i, e := range elems {
		if err := setFromString(out.Index(i), e); err != nil {
			return err
		}
	}
	v.Set(out)
	return nil
}

// setFromString parses s into v with the same parsers the flags use.
func setFromString(v reflect.Value, s string) error {
	var err error
	switch v.Addr().Interface().(type) {
	case *string:
		v.SetString(s)
	case *bool:
		var b bool
		b, err = strconv.ParseBool(s)
		v.SetBool(b)
	case *int, *int64:
		var n int64
		n, err = strconv.ParseInt(s, 0, 64)
		v.SetInt(n)
	case *int32:
		var n int64
		n, err = strconv.ParseInt(s, 0, 32)
		v.SetInt(n)
	case *float64, *float32:
		var f float64
		f, err = strconv.ParseFloat(s, v.Type().Bits())
		v.SetFloat(f)
	case *time.Duration:
		var d time.Duration
		d, err = time.ParseDuration(s)
		v.SetInt(int64(d))
	default:
		err = fmt.Errorf("unsupported type %s", v.Type())
	}
	return err
}

// YAML renders cfg as YAML, for printing and for manifests. Each key
// carries its field's help text as a comment, so the printed config is
// also its documentation; the output loads back with [LoadFile].
func YAML(cfg any) string { return render(cfg, true) }

// Canonical renders cfg as YAML without comments: what a run key hashes,
// so that rewording a help text does not change the key of a run.
func Canonical(cfg any) string { return render(cfg, false) }

func render(cfg any, comments bool) string {
	var n yaml.Node
	if err := n.Encode(cfg); err != nil {
		return fmt.Sprintf("# cannot render config: %v\n", err)
	}
	flowLists(&n)
	v := reflect.ValueOf(cfg)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if comments && v.Kind() == reflect.Struct {
		comment(&n, v.Type())
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return fmt.Sprintf("# cannot render config: %v\n", err)
	}
	enc.Close()
	return buf.String()
}

// flowLists renders every list on one line ("only: [a, b]"), where its
// comment can follow it, as a flag would take it.
func flowLists(n *yaml.Node) {
	if n.Kind == yaml.SequenceNode {
		n.Style = yaml.FlowStyle
	}
	for _, c := range n.Content {
		flowLists(c)
	}
}

// comment attaches help tags to the keys of mapping n, rendered from t.
func comment(n *yaml.Node, t reflect.Type) {
	if n.Kind != yaml.MappingNode {
		return
	}
	help := map[string]string{}
	types := map[string]reflect.Type{}
	walkTypes(t, func(name, h string, ft reflect.Type) {
		help[name], types[name] = h, ft
	})
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		ft := types[k.Value]
		if ft != nil && ft.Kind() == reflect.Struct && ft != durationType {
			if help[k.Value] != "" {
				k.HeadComment = help[k.Value]
			}
			comment(v, ft)
			continue
		}
		if h := help[k.Value]; h != "" {
			v.LineComment = h // scalars and (one-line) lists alike
		}
	}
}

// walkTypes visits the direct yaml keys of struct type t (inline structs
// flattened) with their help and type.
func walkTypes(t reflect.Type, fn func(name, help string, ft reflect.Type)) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		parts := strings.Split(f.Tag.Get("yaml"), ",")
		inline := slices.Contains(parts[1:], "inline") && f.Type.Kind() == reflect.Struct
		if (!f.IsExported() && !(inline && f.Anonymous)) || parts[0] == "-" {
			continue
		}
		if inline {
			walkTypes(f.Type, fn)
			continue
		}
		name := parts[0]
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fn(name, f.Tag.Get("help"), f.Type)
	}
}

// walkValues is walkTypes over the fields of struct value v.
func walkValues(v reflect.Value, fn func(name string, fv reflect.Value)) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		parts := strings.Split(f.Tag.Get("yaml"), ",")
		inline := slices.Contains(parts[1:], "inline") && f.Type.Kind() == reflect.Struct
		if (!f.IsExported() && !(inline && f.Anonymous)) || parts[0] == "-" {
			continue
		}
		if inline {
			walkValues(v.Field(i), fn)
			continue
		}
		name := parts[0]
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fn(name, v.Field(i))
	}
}
