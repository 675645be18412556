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
		case *time.Duration:
			fs.DurationVar(ptr, name, *ptr, help)
		case *[]string:
			fs.StringSliceVar(ptr, name, *ptr, help)
		default:
			panic(fmt.Sprintf("config: field %s has unsupported type %s", name, v.Type()))
		}
	})
}

// walk visits every leaf field with its flag name and help.
func walk(v reflect.Value, prefix string, fn func(name, help string, v reflect.Value)) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if tag == "-" {
			continue
		}
		if tag == "" {
			tag = strings.ToLower(f.Name)
		}
		name := prefix + tag
		fv := v.Field(i)
		if f.Type.Kind() == reflect.Struct && f.Type != durationType {
			walk(fv, name+".", fn)
			continue
		}
		fn(name, f.Tag.Get("help"), fv)
	}
}

// LoadFile decodes a YAML file into cfg (which holds the defaults),
// rejecting keys that cfg does not have.
func LoadFile(path string, cfg any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil && !errors.Is(err, io.EOF) {
		msg := err.Error()
		if strings.Contains(msg, "not found in type") {
			msg = strings.ReplaceAll(msg, "not found in type", "is not a known key of")
			return fmt.Errorf("config %s: %s (see `--print-config` for the valid keys)", path, msg)
		}
		return fmt.Errorf("config %s: %s", path, msg)
	}
	return nil
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
		switch v.Addr().Interface().(type) {
		case *[]string:
			var s []string
			s, err = fs.GetStringSlice(name)
			v.Set(reflect.ValueOf(s))
		default:
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
	case *float64:
		var f float64
		f, err = strconv.ParseFloat(s, 64)
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

// YAML renders cfg as YAML, for printing and for manifests.
func YAML(cfg any) string {
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Sprintf("# cannot render config: %v\n", err)
	}
	return string(b)
}
