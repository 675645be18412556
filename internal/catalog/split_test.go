package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"testing"
)

// The declared split of the larger suite (tasks/README.md, "The split"):
// the tasks whose task.yaml says split_rule: sha256-strata-v1 are grouped
// by (modality, task_type); within a group, ordered by
// sha256("mlerl-suite-split-v1/" + id), the first floor((n+1)/3) are
// held-out and the rest held-in. tasks/gen_common.py's declared_splits
// writes it; this test recomputes it from the task.yaml files alone.
const (
	splitRule = "sha256-strata-v1"
	splitSalt = "mlerl-suite-split-v1/"
)

func declaredSplit(tasks []*suiteTask) map[string]string {
	groups := map[[2]string][]string{}
	for _, st := range tasks {
		if st.SplitRule == splitRule {
			k := [2]string{st.Modality, st.TaskType}
			groups[k] = append(groups[k], st.ID)
		}
	}
	key := func(id string) string {
		h := sha256.Sum256([]byte(splitSalt + id))
		return hex.EncodeToString(h[:])
	}
	out := map[string]string{}
	for _, ids := range groups {
		sort.Slice(ids, func(i, j int) bool { return key(ids[i]) < key(ids[j]) })
		for j, id := range ids {
			out[id] = "held-in"
			if j < (len(ids)+1)/3 {
				out[id] = "held-out"
			}
		}
	}
	return out
}

func TestDeclaredSplit(t *testing.T) {
	suite := loadSuite(t)
	want := declaredSplit(suite)
	count := map[string]int{}
	inHeldIn := map[[2]string]bool{}
	for _, st := range suite {
		count[st.Split]++
		if st.Split == "held-in" {
			inHeldIn[[2]string{st.Modality, ""}] = true
			inHeldIn[[2]string{st.Modality, st.TaskType}] = true
		}
		switch st.SplitRule {
		case "":
			// set by hand (the original fifteen tasks)
		case splitRule:
			if st.Split != want[st.ID] {
				t.Errorf("%s: task.yaml says %s, the declared rule gives %s (regenerate with tasks/generate.py)", st.ID, st.Split, want[st.ID])
			}
		default:
			t.Errorf("%s: unknown split_rule %q (want %s or none)", st.ID, st.SplitRule, splitRule)
		}
	}
	for _, st := range suite {
		if st.Split != "held-out" {
			continue
		}
		// Every held-out modality, and every held-out (modality, task type),
		// also occurs held-in: a held-out task is new, its kind is not.
		if !inHeldIn[[2]string{st.Modality, ""}] {
			t.Errorf("%s: held-out modality %s has no held-in task", st.ID, st.Modality)
		}
		if st.SplitRule == splitRule && !inHeldIn[[2]string{st.Modality, st.TaskType}] {
			t.Errorf("%s: held-out %s %s has no held-in task of that kind", st.ID, st.Modality, st.TaskType)
		}
	}
	if len(want) > 0 && (count["held-in"] < 40 || count["held-out"] < 20) {
		t.Errorf("suite holds %d held-in and %d held-out tasks, want at least 40 and 20", count["held-in"], count["held-out"])
	}
}

// TestDeclaredSplitRule: the rule itself on a fixture: groups of one stay
// held-in, a third (rounded) of a group goes held-out, and the order is
// the hash's, not the ids'.
func TestDeclaredSplitRule(t *testing.T) {
	var fx []*suiteTask
	add := func(mod, typ string, ids ...string) {
		for _, id := range ids {
			fx = append(fx, &suiteTask{ID: id, Modality: mod, TaskType: typ, SplitRule: splitRule})
		}
	}
	add("tabular", "regression", "a", "b", "c", "d", "e")
	add("text", "binary-classification", "solo")
	add("graph", "multiclass-classification", "g1", "g2")
	fx = append(fx, &suiteTask{ID: "by-hand", Modality: "tabular", TaskType: "regression"})
	got := declaredSplit(fx)
	out := map[string]int{}
	for id, s := range got {
		if s == "held-out" {
			out[id[:1]]++
		}
	}
	if got["solo"] != "held-in" {
		t.Errorf("a group of one went %s, want held-in", got["solo"])
	}
	if _, ok := got["by-hand"]; ok {
		t.Errorf("a task without split_rule was assigned by the rule")
	}
	held := 0
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		if got[id] == "held-out" {
			held++
		}
	}
	if held != 2 {
		t.Errorf("group of 5: %d held-out, want 2 (floor(6/3))", held)
	}
	if (got["g1"] == "held-out") == (got["g2"] == "held-out") {
		t.Errorf("group of 2: want exactly one held-out, got %s and %s", got["g1"], got["g2"])
	}
}
