package tokenizer

// Hand-rolled readers for the two big members of tokenizer.json, model.vocab
// (~151k string -> int pairs) and model.merges (~151k pairs): decoding them
// with encoding/json's reflection took most of the load time. The input is a
// json.RawMessage, already validated by encoding/json; escaped strings (a
// few hundred) still go through encoding/json.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

type scanner struct {
	b   []byte
	i   int
	err error
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("offset %d: %s", s.i, fmt.Sprintf(format, args...))
	}
}

func (s *scanner) expect(c byte) {
	if s.err != nil {
		return
	}
	if s.peek() != c {
		s.fail("want %q", c)
		return
	}
	s.i++
}

func (s *scanner) str() string {
	if s.err != nil {
		return ""
	}
	if s.peek() != '"' {
		s.fail("want a string")
		return ""
	}
	start := s.i
	escaped := false
	for j := start + 1; j < len(s.b); j++ {
		switch s.b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			s.i = j + 1
			if !escaped {
				return string(s.b[start+1 : j])
			}
			var out string
			if err := json.Unmarshal(s.b[start:j+1], &out); err != nil {
				s.fail("string: %v", err)
			}
			return out
		}
	}
	s.fail("unterminated string")
	return ""
}

func (s *scanner) int() int {
	if s.err != nil {
		return 0
	}
	s.ws()
	j := s.i
	for j < len(s.b) && (s.b[j] == '-' || ('0' <= s.b[j] && s.b[j] <= '9')) {
		j++
	}
	n, err := strconv.Atoi(string(s.b[s.i:j]))
	if err != nil {
		s.fail("want an integer id")
	}
	s.i = j
	return n
}

// scanVocab reads a {"token": id, ...} object.
func scanVocab(raw []byte) (map[string]int, error) {
	s := &scanner{b: raw}
	// Size the map from a cheap count of entries.
	m := make(map[string]int, bytes.Count(raw, []byte(`":`)))
	s.expect('{')
	if s.peek() == '}' {
		s.i++
		return m, s.err
	}
	for s.err == nil {
		k := s.str()
		s.expect(':')
		m[k] = s.int()
		if s.peek() == ',' {
			s.i++
			continue
		}
		s.expect('}')
		break
	}
	if s.err != nil {
		return nil, fmt.Errorf("model.vocab: %w", s.err)
	}
	return m, nil
}

// scanMerges reads [["a", "b"], ...] or the older ["a b", ...].
func scanMerges(raw []byte) ([][2]string, error) {
	s := &scanner{b: raw}
	var out [][2]string
	s.expect('[')
	if s.peek() == ']' {
		s.i++
		return out, s.err
	}
	out = make([][2]string, 0, bytes.Count(raw, []byte(`],`))+1)
	for s.err == nil {
		if s.peek() == '[' {
			s.i++
			a := s.str()
			s.expect(',')
			b := s.str()
			s.expect(']')
			out = append(out, [2]string{a, b})
		} else {
			pair := s.str()
			a, b, ok := strings.Cut(pair, " ")
			if s.err == nil && !ok {
				return nil, fmt.Errorf("model.merges[%d] %q: no space between the pair", len(out), pair)
			}
			out = append(out, [2]string{a, b})
		}
		if s.peek() == ',' {
			s.i++
			continue
		}
		s.expect(']')
		break
	}
	if s.err != nil {
		return nil, fmt.Errorf("model.merges: %w", s.err)
	}
	return out, nil
}
