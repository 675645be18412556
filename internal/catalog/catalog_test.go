package catalog

import (
	"reflect"
	"regexp"
	"strings"
	"testing"
)

var (
	knownModalities = map[string]bool{tabular: true, image: true, text: true, timeSeries: true, graph: true}
	knownTaskTypes  = map[string]bool{binary: true, multiclass: true, multilabel: true, regression: true, count: true, forecast: true}
	// The sections each category may edit (evaluate is never edited).
	categorySections = map[string]map[string]bool{
		"data":     {"data": true},
		"model":    {"model": true},
		"learning": {"training": true, "model": true},
	}
)

func TestCatalogWellFormed(t *testing.T) {
	all := All()
	if len(all) < 250 {
		t.Errorf("catalog has %d ideas, want a few hundred (>= 250)", len(all))
	}
	ids, texts := map[string]string{}, map[string]string{}
	perCat := map[string]int{}
	for _, i := range all {
		perCat[i.Category]++
		if prev, dup := ids[i.ID]; dup {
			t.Errorf("duplicate id %q (texts %q and %q)", i.ID, prev, i.Text)
		}
		ids[i.ID] = i.Text
		n := Normalize(i.Text)
		if prev, dup := texts[n]; dup {
			t.Errorf("ideas %s and %s have the same normalised text %q", prev, i.ID, n)
		}
		texts[n] = i.ID
		if !strings.HasPrefix(i.ID, i.Category+"/") {
			t.Errorf("%s: id does not start with its category %q", i.ID, i.Category)
		}
		if strings.TrimSpace(i.Text) == "" || strings.Contains(i.Text, "%!") {
			t.Errorf("%s: bad text %q", i.ID, i.Text)
		}
		for _, m := range i.Modalities {
			if !knownModalities[m] {
				t.Errorf("%s: unknown modality %q", i.ID, m)
			}
		}
		for _, tt := range i.TaskTypes {
			if !knownTaskTypes[tt] {
				t.Errorf("%s: unknown task type %q", i.ID, tt)
			}
		}
		allowed, ok := categorySections[i.Category]
		if !ok {
			t.Errorf("%s: unknown category %q", i.ID, i.Category)
			continue
		}
		if len(i.Edit.Ops) == 0 {
			t.Errorf("%s: edit has no operations", i.ID)
		}
		for k, op := range i.Edit.Ops {
			if !allowed[op.Section] {
				t.Errorf("%s op %d: a %s idea must not edit section %q", i.ID, k+1, i.Category, op.Section)
			}
			if i.Category == "learning" && op.Section == "model" && op.Op != "sub" {
				t.Errorf("%s op %d: a learning idea may only adjust the model section with sub, got %q", i.ID, k+1, op.Op)
			}
			switch op.Op {
			case "sub":
				if _, err := regexp.Compile(op.Pattern); err != nil {
					t.Errorf("%s op %d: pattern: %v", i.ID, k+1, err)
				}
			case "replace", "append", "prepend":
				if strings.Contains(op.Code, "%!") {
					t.Errorf("%s op %d: formatting error in code: %q", i.ID, k+1, op.Code)
				}
			default:
				t.Errorf("%s op %d: unknown op %q", i.ID, k+1, op.Op)
			}
		}
	}
	for _, c := range []string{"data", "model", "learning"} {
		if perCat[c] < 50 {
			t.Errorf("category %s has %d ideas, want >= 50", c, perCat[c])
		}
	}
}

func TestEditJSONRoundTrip(t *testing.T) {
	for _, i := range All() {
		got, err := ParseEdit(i.Edit.JSON())
		if err != nil {
			t.Errorf("%s: ParseEdit(JSON()): %v", i.ID, err)
			continue
		}
		if !reflect.DeepEqual(got, i.Edit) {
			t.Errorf("%s: round trip changed the edit: got %+v want %+v", i.ID, got, i.Edit)
		}
	}
	if _, err := ParseEdit(`{"ops": [`); err == nil {
		t.Error("ParseEdit of truncated JSON: got no error")
	}
}

func TestLookup(t *testing.T) {
	for _, i := range All() {
		for _, q := range []string{i.Text, "  " + strings.ToUpper(i.Text) + ".", strings.ReplaceAll(i.Text, " ", "  "), i.ID} {
			got, ok := Lookup(q)
			if !ok || got.ID != i.ID {
				t.Errorf("Lookup(%q): got %q, %v want %q", q, got.ID, ok, i.ID)
			}
		}
	}
	if got, ok := Lookup("make the model better somehow"); ok {
		t.Errorf("Lookup of a free-form instruction: got %q, want no match", got.ID)
	}
}

func TestForTask(t *testing.T) {
	tests := []struct {
		modality, taskType string
		want, notWant      string
	}{
		{"tabular", "regression", "model/ridge-alpha1", "model/logreg-c1"},
		{"tabular", "binary-classification", "model/logreg-c1", "model/ridge-alpha1"},
		{"text", "multiclass-classification", "data/tfidf-ngram1-2-mindf1", "data/standard-scaler"},
		{"time-series", "forecasting", "data/fourier-2", "data/tfidf-ngram1-2-mindf1"},
		{"graph", "multiclass-classification", "data/neighbor-mean-1hop", "model/ml-random-forest-n200"},
		{"tabular", "multilabel-classification", "model/ml-random-forest-n200", "learning/bagging-10"},
		{"image", "multiclass-classification", "data/augment-shift-4", "data/fourier-2"},
	}
	for _, tt := range tests {
		ids := map[string]bool{}
		for _, i := range ForTask(tt.modality, tt.taskType) {
			ids[i.ID] = true
		}
		if !ids[tt.want] {
			t.Errorf("ForTask(%s, %s) lacks %s", tt.modality, tt.taskType, tt.want)
		}
		if ids[tt.notWant] {
			t.Errorf("ForTask(%s, %s) has %s, which does not fit", tt.modality, tt.taskType, tt.notWant)
		}
	}
}

const script = `#!/usr/bin/env python3
# === imports ===
import numpy as np
# === end imports ===
# === data ===
X = 1
# === end data ===
# === model ===
model = Foo(n_estimators=10)
# === end model ===
# === training ===
model.fit(X)
# === end training ===
`

func TestApply(t *testing.T) {
	tests := []struct {
		name    string
		edit    Edit
		want    string // substring of the result
		wantErr string // substring of the error
	}{
		{"append", Edit{Ops: []Op{{Section: "data", Op: "append", Code: "Y = 2"}}}, "X = 1\nY = 2\n# === end data ===", ""},
		{"prepend", Edit{Ops: []Op{{Section: "data", Op: "prepend", Code: "Y = 2\n"}}}, "# === data ===\nY = 2\nX = 1\n", ""},
		{"replace", Edit{Ops: []Op{{Section: "model", Op: "replace", Code: "model = Bar()"}}}, "# === model ===\nmodel = Bar()\n# === end model ===", ""},
		{"sub", Edit{Ops: []Op{{Section: "model", Op: "sub", Pattern: `n_estimators=\d+`, Repl: "n_estimators=500"}}}, "Foo(n_estimators=500)", ""},
		{"sub group", Edit{Ops: []Op{{Section: "model", Op: "sub", Pattern: `\b(Foo)\(`, Repl: "${1}(a=1, "}}}, "Foo(a=1, n_estimators=10)", ""},
		{"two ops in order", Edit{Ops: []Op{{Section: "data", Op: "append", Code: "Y = 2"}, {Section: "data", Op: "sub", Pattern: `Y = 2`, Repl: "Y = 3"}}}, "Y = 3", ""},
		{"missing section", Edit{Ops: []Op{{Section: "evaluate", Op: "append", Code: "x"}}}, "", `section "evaluate" not found`},
		{"pattern not found", Edit{Ops: []Op{{Section: "model", Op: "sub", Pattern: `max_iter=\d+`, Repl: "max_iter=5"}}}, "", "not found in section"},
		{"pattern outside section", Edit{Ops: []Op{{Section: "training", Op: "sub", Pattern: `n_estimators`, Repl: "x"}}}, "", "not found in section"},
		{"bad pattern", Edit{Ops: []Op{{Section: "model", Op: "sub", Pattern: `(`, Repl: "x"}}}, "", "bad pattern"},
		{"unknown op", Edit{Ops: []Op{{Section: "model", Op: "delete"}}}, "", "unknown op"},
		{"no ops", Edit{}, "", "no operations"},
		{"second op fails", Edit{Ops: []Op{{Section: "data", Op: "append", Code: "Y = 2"}, {Section: "nope", Op: "append"}}}, "", "edit op 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Apply(script, tt.edit)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Apply: got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if !strings.Contains(got, tt.want) {
				t.Errorf("Apply: got\n%s\nwant it to contain %q", got, tt.want)
			}
			if !strings.HasPrefix(got, "#!/usr/bin/env python3\n") {
				t.Errorf("Apply lost the text outside sections:\n%s", got)
			}
		})
	}
}

// TestLookupIndexMatchesTheScan: the indexed Lookup answers what the
// linear scan it replaced answered (the first idea of All whose
// normalized text or id matches), for every idea's text, id and spelling
// variants, and for instructions that name no idea.
func TestLookupIndexMatchesTheScan(t *testing.T) {
	scan := func(instruction string) (Idea, bool) {
		n := Normalize(instruction)
		for _, i := range All() {
			if Normalize(i.Text) == n || i.ID == strings.TrimSpace(instruction) {
				return i, true
			}
		}
		return Idea{}, false
	}
	queries := []string{"", "  ", "make the model better somehow", "nothing."}
	for _, i := range All() {
		queries = append(queries, i.Text, i.ID, " "+i.ID+"\n", strings.ToUpper(i.Text)+".", "  "+strings.ReplaceAll(i.Text, " ", "   ")+"!")
	}
	for _, q := range queries {
		want, wok := scan(q)
		got, ok := Lookup(q)
		if ok != wok || got.ID != want.ID {
			t.Errorf("Lookup(%q) = %q, %v; the scan: %q, %v", q, got.ID, ok, want.ID, wok)
		}
	}
}
