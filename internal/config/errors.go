package config

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// FieldError is a bad value of one config key. Validate methods return it
// through [Errorf] with the key relative to their own config
// ("max_steps"); a config that holds another prefixes the key with [Nest]
// ("env.max_steps"). [Resolve] then fills in where the value came from, so
// that the one-line message names the key as the user wrote it:
//
//	--env.max_steps -1: must be positive                  (a flag)
//	config r.yaml line 3: env.max_steps -1: must be positive (the YAML file)
//	env.max_steps -1: must be positive                    (the default)
type FieldError struct {
	Key   string // dotted key, as in the YAML file: "env.max_steps"
	Value any    // the bad value (nil: none shown)
	Msg   string // what is wrong, and what would be right

	Flag string // the flag that set the value, as typed ("--env.max-steps"); empty if none
	File string // else the YAML file that set it,
	Line int    // and the line
}

func (e *FieldError) Error() string {
	key := e.Key
	if e.Flag != "" {
		key = e.Flag
	}
	if e.Value != nil {
		key += " " + FormatValue(e.Value)
	}
	if e.Flag == "" && e.File != "" {
		return fmt.Sprintf("config %s line %d: %s: %s", e.File, e.Line, key, e.Msg)
	}
	return key + ": " + e.Msg
}

// Errorf returns a *FieldError for key holding value (nil: not shown),
// with the message format and args.
func Errorf(key string, value any, format string, args ...any) error {
	return &FieldError{Key: key, Value: value, Msg: fmt.Sprintf(format, args...)}
}

// Nest prefixes the key of a *FieldError in err with prefix (a config's
// key in its parent: "env"); another error becomes "prefix: err". Nil
// stays nil.
func Nest(prefix string, err error) error {
	if err == nil {
		return nil
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		c := *fe
		c.Key = prefix + "." + c.Key
		return &c
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// FormatValue renders a config value the way a user writes it: strings
// quoted (so that an empty one shows), durations as 1m30s, floats in
// their shortest form, lists as [a, b].
func FormatValue(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case time.Duration:
		return x.String()
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32)
	case []string:
		q := make([]string, len(x))
		for i, s := range x {
			q[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	return fmt.Sprint(v)
}

// syntaxError turns yaml.v3's parse error into one naming the line at
// fault. yaml.v3 reports the line where the enclosing block or flow
// collection started, counted from 0 for parser errors and from 1 for
// scanner errors (and no line at all on the first), so it is found here
// instead: the line after the longest run of leading lines that still
// parses. An unclosed bracket or quote is reported where it opens; a
// badly indented key on its own line.
func syntaxError(path string, b []byte, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if _, after, ok := strings.Cut(rest, ": "); ok {
			msg = after
		}
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	line := 1
	for n := len(lines) - 1; n >= 1; n-- {
		var doc yaml.Node
		if yaml.Unmarshal(bytes.Join(lines[:n], nil), &doc) == nil {
			line = n + 1
			break
		}
	}
	text := ""
	if line <= len(lines) {
		text = strings.TrimSpace(string(lines[line-1]))
	}
	if len(text) > 60 {
		text = text[:57] + "..."
	}
	if text != "" {
		msg += fmt.Sprintf(" (in %q)", text)
	}
	return fmt.Errorf("config %s line %d: %s", path, line, msg)
}
