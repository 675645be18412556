// Package config loads a stage's Config: defaults, then a YAML file, then
// command-line flags, in that order. Unknown YAML keys are rejected with
// their name. Every field of a Config struct becomes a flag named after its
// yaml tag (nested structs join names with a dot: "llm.base_url"), with the
// help text from its `help` tag, so a field is documented exactly once.
//
// Start with [Bind] (in the command's setup) and [Resolve] (when it runs).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
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
// values as defaults.
func Bind(fs *pflag.FlagSet, cfg any) {
	walk(reflect.ValueOf(cfg).Elem(), "", func(name, help string, v reflect.Value) {
		p := v.Addr().Interface()
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
	})
}

// walk visits every leaf field with its flag name and help.
func walk(v reflect.Value, prefix string, fn func(name, help string, v reflect.Value)) {
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
		fn(name, f.Tag.Get("help"), fv)
	}
}

// LoadFile decodes a YAML file into cfg (which holds the defaults),
// rejecting keys that cfg does not have: the error names the file, the
// line and the full dotted key ("llm.base_ulr"), and lists the valid keys
// at that level. An empty file changes nothing.
func LoadFile(path string, cfg any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("config %s: %v", path, err)
	}
	if len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("config %s line %d: want a mapping of key: value, got a %s", path, root.Line, kindName(root.Kind))
	}
	if err := checkKeys(root, reflect.TypeOf(cfg).Elem(), ""); err != nil {
		return fmt.Errorf("config %s %w", path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config %s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	return nil
}

// checkKeys reports the first key of the mapping n that struct type t
// does not have, with its line and dotted name.
func checkKeys(n *yaml.Node, t reflect.Type, prefix string) error {
	fields := map[string]reflect.Type{}
	var names []string
	walkTypes(t, func(name, _ string, ft reflect.Type) {
		fields[name] = ft
		names = append(names, name)
	})
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		ft, ok := fields[k.Value]
		if !ok {
			return fmt.Errorf("line %d: unknown key %q (valid keys%s: %s; see --print-config)", k.Line, prefix+k.Value, under(prefix), strings.Join(names, ", "))
		}
		if ft.Kind() == reflect.Struct && ft != durationType && v.Kind == yaml.MappingNode {
			if err := checkKeys(v, ft, prefix+k.Value+"."); err != nil {
				return err
			}
		}
	}
	return nil
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
	case yaml.ScalarNode:
		return "single value"
	}
	return "non-mapping"
}

// Resolve builds the final config: defaults(), then the YAML file (if
// path is not empty), then every flag the user set on fs. It derives and
// validates the result.
func Resolve[T any](fs *pflag.FlagSet, path string, defaults func() T) (T, error) {
	cfg := defaults()
	if path != "" {
		if err := LoadFile(path, &cfg); err != nil {
			return cfg, err
		}
	}
	var ferr error
	walk(reflect.ValueOf(&cfg).Elem(), "", func(name, _ string, v reflect.Value) {
		fl := fs.Lookup(name)
		if fl == nil || !fl.Changed || ferr != nil {
			return
		}
		var err error
		if sv, ok := fl.Value.(pflag.SliceValue); ok && v.Kind() == reflect.Slice {
			err = setSlice(v, sv.GetSlice())
		} else {
			err = setFromString(v, fl.Value.String())
		}
		if err != nil {
			ferr = fmt.Errorf("flag --%s: %w", name, err)
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
			if path != "" {
				return cfg, fmt.Errorf("config %s: %w", path, err)
			}
			return cfg, fmt.Errorf("config: %w", err)
		}
	}
	return cfg, nil
}

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
func YAML(cfg any) string {
	var n yaml.Node
	if err := n.Encode(cfg); err != nil {
		return fmt.Sprintf("# cannot render config: %v\n", err)
	}
	v := reflect.ValueOf(cfg)
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() == reflect.Struct {
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
			if v.Kind == yaml.ScalarNode {
				v.LineComment = h
			} else {
				k.LineComment = h // after "key:", not after the last item
			}
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
