package catalog

import "testing"

// TestSearchLists: every idea the catalog search names exists and applies
// to the kind of task it is listed for, every kind of the built-in suite
// has lists, and a kind without lists gets none.
func TestSearchLists(t *testing.T) {
	kinds := []struct{ modality, taskType, kind string }{
		{tabular, binary, "tabular/clf"},
		{tabular, multiclass, "tabular/clf"},
		{tabular, regression, "tabular/reg"},
		{tabular, multilabel, "tabular/multilabel"},
		{image, multiclass, image},
		{text, binary, text},
		{timeSeries, forecast, timeSeries},
		{graph, multiclass, graph},
	}
	for _, k := range kinds {
		if got := Kind(k.modality, k.taskType); got != k.kind {
			t.Errorf("Kind(%s, %s): got %s, want %s", k.modality, k.taskType, got, k.kind)
		}
		obvious, strong := Search(k.modality, k.taskType)
		if len(obvious) < 3 || len(strong) < 5 {
			t.Errorf("%s: %d obvious and %d strong lists, want at least 3 and 5", k.kind, len(obvious), len(strong))
		}
		for _, ids := range append(append([][]string{}, obvious...), strong...) {
			for _, id := range ids {
				i, ok := Lookup(id)
				if !ok {
					t.Errorf("%s: %s is not a catalog idea", k.kind, id)
				} else if !i.Applies(k.modality, k.taskType) {
					t.Errorf("%s: %s does not apply to %s %s tasks", k.kind, id, k.modality, k.taskType)
				}
			}
		}
	}
	if o, s := Search("audio", "regression"); len(o)+len(s) != 0 {
		t.Errorf("audio: got %d lists, want none", len(o)+len(s))
	}
}
