package tokenizer

import (
	"encoding/json"
	"maps"
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestScannersMatchEncodingJSON checks the hand-rolled readers against
// encoding/json on the installed tokenizer.json.
func TestScannersMatchEncodingJSON(t *testing.T) {
	qwen(t)
	data, err := os.ReadFile(qwenPath)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Model struct {
			Vocab  json.RawMessage `json:"vocab"`
			Merges json.RawMessage `json:"merges"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	var wantVocab map[string]int
	var wantMerges [][2]string
	if err := json.Unmarshal(f.Model.Vocab, &wantVocab); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(f.Model.Merges, &wantMerges); err != nil {
		t.Fatal(err)
	}
	gotVocab, err := scanVocab(f.Model.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(gotVocab, wantVocab) {
		t.Errorf("scanVocab: %d entries differ from encoding/json's %d", len(gotVocab), len(wantVocab))
	}
	gotMerges, err := scanMerges(f.Model.Merges)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotMerges, wantMerges) {
		t.Errorf("scanMerges: %d merges differ from encoding/json's %d", len(gotMerges), len(wantMerges))
	}
}

func TestScanners(t *testing.T) {
	vocabTests := []struct {
		in   string
		want map[string]int
		err  string
	}{
		{`{}`, map[string]int{}, ""},
		{` { "a" : 1 , "\u0120b\"": 22 }`, map[string]int{"a": 1, "Ġb\"": 22}, ""},
		{`{"a": 1,}`, nil, "want a string"},
		{`{"a": x}`, nil, "integer"},
		{`["a"]`, nil, "want '{'"},
		{`{"a`, nil, "unterminated"},
	}
	for _, tt := range vocabTests {
		got, err := scanVocab([]byte(tt.in))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("scanVocab(%s) error = %v, want one containing %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || !maps.Equal(got, tt.want) {
			t.Errorf("scanVocab(%s) = %v, %v, want %v", tt.in, got, err, tt.want)
		}
	}
	mergeTests := []struct {
		in   string
		want [][2]string
		err  string
	}{
		{`[]`, nil, ""},
		{`[["a","b"], [ "\\", "\/" ]]`, [][2]string{{"a", "b"}, {`\`, "/"}}, ""},
		{`["a b", "c d"]`, [][2]string{{"a", "b"}, {"c", "d"}}, ""},
		{`[["a"]]`, nil, "want ','"},
		{`["ab"]`, nil, "no space"},
	}
	for _, tt := range mergeTests {
		got, err := scanMerges([]byte(tt.in))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("scanMerges(%s) error = %v, want one containing %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("scanMerges(%s) = %v, %v, want %v", tt.in, got, err, tt.want)
		}
	}
}
