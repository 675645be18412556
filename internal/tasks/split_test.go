package tasks

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/sandbox"
)

// answersCSV builds an answers.csv of ids and labels.
func answersCSV(ids, labels []string) []byte {
	var b strings.Builder
	b.WriteString("id,label\n")
	for i := range ids {
		fmt.Fprintf(&b, "%s,%s\n", ids[i], labels[i])
	}
	return []byte(b.String())
}

// partOf reads parts.csv into id -> part.
func partOf(t *testing.T, parts []byte) map[string]string {
	t.Helper()
	recs, err := csv.NewReader(bytes.NewReader(parts)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range recs[1:] {
		out[r[0]] = r[1]
	}
	return out
}

func seq(n int, f func(i int) string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

func TestSplitAnswersStrata(t *testing.T) {
	// 30 rows of three classes of 6, 10 and 14 rows: each class is halved
	// (to a row), and the parts differ by at most one row.
	n := 30
	ids := seq(n, func(i int) string { return fmt.Sprint(1000 + i*7) })
	labels := seq(n, func(i int) string {
		switch {
		case i < 6:
			return "a"
		case i < 16:
			return "b"
		}
		return "c"
	})
	parts, err := SplitAnswers(answersCSV(ids, labels), SplitStrataHash, "", "multiclass-classification", "accuracy")
	if err != nil {
		t.Fatal(err)
	}
	got := partOf(t, parts)
	perClass := map[string][2]int{}
	pub := 0
	for i, id := range ids {
		c := perClass[labels[i]]
		if got[id] == PartPublic {
			c[0]++
			pub++
		} else {
			c[1]++
		}
		perClass[labels[i]] = c
	}
	if pub != n/2 {
		t.Errorf("got %d public rows of %d, want %d", pub, n, n/2)
	}
	for l, c := range perClass {
		if d := c[0] - c[1]; d < -1 || d > 1 {
			t.Errorf("class %s: got %d public and %d private, want halves to a row", l, c[0], c[1])
		}
	}
	// The same rows, shuffled, get the same parts: the rule reads ids and
	// labels, not the file's order.
	rev := func(s []string) []string {
		out := append([]string(nil), s...)
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
		return out
	}
	parts2, err := SplitAnswers(answersCSV(rev(ids), rev(labels)), SplitStrataHash, "", "multiclass-classification", "accuracy")
	if err != nil {
		t.Fatal(err)
	}
	for id, p := range partOf(t, parts2) {
		if got[id] != p {
			t.Errorf("id %s: got %s after reordering the rows, %s before", id, p, got[id])
		}
	}
	// Another seed deals the rows otherwise.
	parts3, err := SplitAnswers(answersCSV(ids, labels), SplitStrataHash, "another-seed", "multiclass-classification", "accuracy")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(parts, parts3) {
		t.Error("got the same parts with another seed")
	}
}

func TestSplitAnswersTime(t *testing.T) {
	// Ids are time steps in any file order: the earlier half is public.
	ids := []string{"17", "3", "12", "5", "9", "1", "20", "8", "2", "15", "11", "4", "19", "6", "13", "7", "18"}
	labels := seq(len(ids), func(i int) string { return fmt.Sprint(i) })
	parts, err := SplitAnswers(answersCSV(ids, labels), SplitTime, "", "forecasting", "mae")
	if err != nil {
		t.Fatal(err)
	}
	got := partOf(t, parts)
	for _, id := range ids {
		var v int
		fmt.Sscan(id, &v)
		// 17 rows: the 8 earliest (1..8) public, the 9 later private.
		want := PartPrivate
		if v <= 8 {
			want = PartPublic
		}
		if got[id] != want {
			t.Errorf("t=%s: got %s, want %s", id, got[id], want)
		}
	}
	// The lines of parts.csv follow the answers' order.
	lines := strings.Split(strings.TrimSpace(string(parts)), "\n")
	for i, id := range ids {
		if !strings.HasPrefix(lines[i+1], id+",") {
			t.Errorf("parts.csv line %d: got %q, want id %s", i+2, lines[i+1], id)
		}
	}
}

func TestSplitAnswersRefuses(t *testing.T) {
	ids20 := seq(20, func(i int) string { return fmt.Sprint(i) })
	for _, tc := range []struct {
		name, rule, taskType, metric string
		answers                      []byte
		want                         string
	}{
		{"too few rows", SplitStrataHash, "regression", "rmse", answersCSV(ids20[:15], ids20[:15]), "answers.csv has 15 rows: each part of the hidden answers needs at least 8, so the task needs at least 16 test rows"},
		{"time ids not numbers", SplitTime, "forecasting", "mae", answersCSV(seq(16, func(i int) string { return fmt.Sprintf("w%d", i) }), ids20[:16]), `answers.csv line 2: id "w0" is not a number`},
		{"one class in a part", SplitStrataHash, "binary-classification", "roc_auc", answersCSV(ids20, seq(20, func(i int) string {
			if i == 0 {
				return "1"
			}
			return "0"
		})), "part one class only: roc_auc needs both classes in each part"},
		{"repeated id", SplitStrataHash, "regression", "rmse", answersCSV(append(ids20[:19:19], "3"), ids20), `line 21: id "3" repeats line 5`},
		{"unknown rule", "random", "regression", "rmse", answersCSV(ids20, ids20), `answer_split "random" cannot be computed`},
		{"one column", SplitStrataHash, "regression", "rmse", []byte("id\n1\n"), "has 1 column(s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := SplitAnswers(tc.answers, tc.rule, "", tc.taskType, tc.metric)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestCheckParts(t *testing.T) {
	ids := seq(16, func(i int) string { return fmt.Sprint(i) })
	answers := answersCSV(ids, ids)
	good, err := SplitAnswers(answers, SplitStrataHash, "", "regression", "mae")
	if err != nil {
		t.Fatal(err)
	}
	swap := strings.Replace(string(good), "\n0,", "\nX,", 1)
	for _, tc := range []struct{ name, parts, want string }{
		{"good", string(good), ""},
		{"no header", strings.SplitN(string(good), "\n", 2)[1], "must start with the header id,part"},
		{"other id", swap, `line 2: id "X", but answers.csv line 2 has id "0"`},
		{"bad part", strings.Replace(string(good), "public", "shown", 1), `part "shown": want public or private`},
		{"short", strings.Join(strings.Split(string(good), "\n")[:10], "\n"), "has 9 rows and answers.csv 16"},
		{"all public", strings.ReplaceAll(string(good), "private", "public"), "gives 16 public and 0 private rows"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckParts(answers, []byte(tc.parts), "mae")
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestSuiteParts checks every built-in task's committed private/parts.csv
// against its task.yaml rule (LoadWith recomputes it), and that each part
// has its m_best. MLERL_PARTS_WRITE=1 writes the files instead (after
// tasks/generate.py regenerated a task's answers).
func TestSuiteParts(t *testing.T) {
	root := filepath.Join("..", "..", "tasks")
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		dir := filepath.Join(root, e.Name())
		spec, err := os.ReadFile(filepath.Join(dir, SpecFile))
		if err != nil {
			continue
		}
		n++
		s, err := ParseSpec(spec)
		if err != nil {
			t.Fatal(err)
		}
		if s.AnswerSplit == "" || s.AnswerSplit == SplitGiven {
			t.Errorf("%s: task.yaml has answer_split %q; the suite's tasks declare a computable rule", e.Name(), s.AnswerSplit)
			continue
		}
		if os.Getenv("MLERL_PARTS_WRITE") == "1" {
			answers, err := os.ReadFile(filepath.Join(dir, PrivateDir, AnswersFile))
			if err != nil {
				t.Fatal(err)
			}
			parts, err := SplitAnswers(answers, s.AnswerSplit, s.AnswerSplitSeed, s.TaskType, s.Metric)
			if err != nil {
				t.Errorf("%s: %v", e.Name(), err)
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, PrivateDir, PartsFile), parts, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		task, err := Load(dir)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if task.PartsComputed {
			t.Errorf("%s: no private/%s committed (MLERL_PARTS_WRITE=1 writes it)", e.Name(), PartsFile)
		}
		if task.MBestPublic == nil || task.MBestPrivate == nil {
			t.Errorf("%s: task.yaml lacks m_best_public or m_best_private (TestMeasureHeadroom measures them)", e.Name())
		}
	}
	if n < 60 {
		t.Errorf("got %d suite tasks, want the 62 of tasks/", n)
	}
}

// TestLoadParts: a task folder's parts are computed by its rule when it
// has no private/parts.csv, checked against the rule when it has one,
// taken as they are with answer_split: given, and absent with none.
func TestLoadParts(t *testing.T) {
	var ans strings.Builder
	ans.WriteString("id,y\n")
	for i := 0; i < 20; i++ {
		fmt.Fprintf(&ans, "%d,%d\n", i, i%2)
	}
	spec := strings.Replace(goodSpec, "answer_split: none\n", "", 1)
	computed, err := SplitAnswers([]byte(ans.String()), SplitStrataHash, "", "binary-classification", "accuracy")
	if err != nil {
		t.Fatal(err)
	}
	// Every row's part flipped: still 10 and 10, both classes in each.
	flipped := strings.NewReplacer("public", "private", "private", "public").Replace(string(computed))
	for _, c := range []struct {
		name, spec, parts string
		computed          bool
		want              string
	}{
		{"computed", spec, "", true, ""},
		{"committed, equal", spec, string(computed), false, ""},
		{"committed, other", spec, flipped, false, "private/parts.csv: differs from what task.yaml's answer_split strata-hash-v1 (seed \"mlerl-answers-v1\") computes"},
		{"given", spec + "answer_split: given\n", flipped, false, ""},
		{"given without a file", spec + "answer_split: given\n", "", false, "private/parts.csv: missing: answer_split given needs the author's private/parts.csv"},
		{"none with a file", spec + "answer_split: none\n", string(computed), false, "task.yaml says answer_split: none, but there is a private/parts.csv"},
		{"other seed", spec + "answer_split_seed: another\n", string(computed), false, "differs from what task.yaml's answer_split strata-hash-v1 (seed \"another\") computes"},
		{"bad rule", spec + "answer_split: random\n", "", false, `field answer_split: "random": want strata-hash-v1`},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := map[string]string{SpecFile: c.spec, "private/answers.csv": ans.String()}
			if c.parts != "" {
				files["private/parts.csv"] = c.parts
			}
			task, err := Load(writeTask(t, t.TempDir(), "toy", files))
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("got %v, want an error containing %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if task.PartsComputed != c.computed || task.PartRows != (PartCounts{10, 10}) {
				t.Errorf("got computed %v, rows %+v; want computed %v, 10 and 10", task.PartsComputed, task.PartRows, c.computed)
			}
			files2, err := task.PrivateFiles()
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := files2[PartsFile]; !ok {
				t.Errorf("the private files graders get hold no %s", PartsFile)
			}
		})
	}
	// Too few answers: the error says how to fix it.
	_, err = Load(writeTask(t, t.TempDir(), "toy", map[string]string{SpecFile: spec}))
	if err == nil || !strings.Contains(err.Error(), "answers.csv has 1 rows: each part of the hidden answers needs at least 8") || !strings.Contains(err.Error(), "answer_split: none") {
		t.Errorf("got %v, want the too-few-rows error with its fixes", err)
	}
}

// TestSplitAnswersKeyed: the keyed split keeps each rule's shape (each
// class halved; the horizon dealt in pairs, one row of each public), is
// the same for the same key and task, differs with the key and the task,
// and is not the reference split that task.yaml's public seed gives.
func TestSplitAnswersKeyed(t *testing.T) {
	key1, key2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	n := 40
	ids := seq(n, func(i int) string { return fmt.Sprint(1000 + i) })
	labels := seq(n, func(i int) string { return []string{"a", "b"}[i%3%2] })
	answers := answersCSV(ids, labels)
	split := func(rule, task string, key []byte) map[string]string {
		t.Helper()
		p, err := SplitAnswersKeyed(answers, rule, task, 0, key, "binary-classification", "accuracy")
		if err != nil {
			t.Fatal(err)
		}
		return partOf(t, p)
	}
	same := func(a, b map[string]string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }
	a := split(SplitStrataHash, "t1", key1)
	if !same(a, split(SplitStrataHash, "t1", key1)) {
		t.Error("the same key gave two splits")
	}
	if same(a, split(SplitStrataHash, "t1", key2)) || same(a, split(SplitStrataHash, "t2", key1)) {
		t.Error("another key, or another task, gave the same split")
	}
	ref, err := SplitAnswers(answers, SplitStrataHash, DefaultSplitSeed, "binary-classification", "accuracy")
	if err != nil {
		t.Fatal(err)
	}
	if same(a, partOf(t, ref)) {
		t.Error("the keyed split is the reference split")
	}
	count := map[string]int{}
	for i, id := range ids {
		count[labels[i]+"/"+a[id]]++
	}
	for _, l := range []string{"a", "b"} {
		if d := count[l+"/public"] - count[l+"/private"]; d < -1 || d > 1 {
			t.Errorf("class %s: %d public, %d private: not halved", l, count[l+"/public"], count[l+"/private"])
		}
	}
	// Forecasting: one row of each consecutive pair of the horizon public,
	// whichever the key says; the earlier half is not the public part.
	tm := split(SplitTime, "t1", key1)
	pub := 0
	for k := 0; k < n; k += 2 {
		if (tm[ids[k]] == PartPublic) == (tm[ids[k+1]] == PartPublic) {
			t.Errorf("pair %d,%d: %s and %s", k, k+1, tm[ids[k]], tm[ids[k+1]])
		}
		if tm[ids[k]] == PartPublic {
			pub++
		}
	}
	if pub == 0 || pub == n/2 {
		t.Errorf("the first of every pair is always (or never) public: %d of %d", pub, n/2)
	}
	if _, err := SplitAnswersKeyed(answers, SplitStrataHash, "t1", 0, []byte("short"), "binary-classification", "accuracy"); err == nil {
		t.Error("a 5-byte key was taken")
	}
}

// TestLoadKeyedParts: with the data root's key a suite task's committed
// parts.csv (the reference split) is set aside for the keyed split, whose
// description names no seed, and task.yaml's per-part m_best (measured on
// the reference split) no longer apply.
func TestLoadKeyedParts(t *testing.T) {
	dir := filepath.Join("..", "..", "tasks", "affairs-survey")
	ref, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	keyed, err := LoadWith(dir, LoadOptions{SplitKey: bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	if !keyed.PartsKeyed || bytes.Equal(keyed.Parts, ref.Parts) || keyed.MBestPublic != nil || keyed.MBestPrivate != nil {
		t.Errorf("keyed: parts keyed %v, same as the reference %v, m_best_public %v", keyed.PartsKeyed, bytes.Equal(keyed.Parts, ref.Parts), keyed.MBestPublic)
	}
	if d := keyed.SplitDescription(); !strings.Contains(d, "keyed by the data root's secret") || strings.Contains(d, DefaultSplitSeed) {
		t.Errorf("description %q", d)
	}
	if row := keyed.Row(); *row.MBestPublic != row.MBest || *row.MBestPrivate != row.MBest {
		t.Errorf("row's per-part m_best %v %v, want both m_best %v", *row.MBestPublic, *row.MBestPrivate, row.MBest)
	}
	files, err := keyed.PrivateFiles()
	if err != nil || !bytes.Equal(files[PartsFile].Data, keyed.Parts) {
		t.Errorf("the private tree's parts.csv is not the keyed split (%v)", err)
	}
}

// TestKeyedSplitRedraws: a keyed split whose first draw leaves a part
// without headroom (the initial script's score there not short of m_best,
// which both parts take) is drawn again until one leaves both some; the
// draw kept is in the description and the private tree. No draw that
// does: the first, and RunBaseline's error naming the part.
func TestKeyedSplitRedraws(t *testing.T) {
	var ans strings.Builder
	ans.WriteString("id,y\n")
	for i := range 40 {
		fmt.Fprintf(&ans, "%d,%d\n", i, i%2)
	}
	spec := strings.Replace(goodSpec, "answer_split: none", "answer_split: strata-hash-v1", 1)
	dir := writeTask(t, t.TempDir(), "toy", map[string]string{SpecFile: spec, "private/answers.csv": ans.String()})
	key := bytes.Repeat([]byte{9}, 32)
	first, err := SplitAnswersKeyed([]byte(ans.String()), SplitStrataHash, "toy", 0, key, "binary-classification", "accuracy")
	if err != nil {
		t.Fatal(err)
	}
	// The "grader": the public part scores 0.99 (over m_best 0.95) on the
	// first draw, 0.6 on any other; the private part 0.6.
	graded := 0
	grade := func(_ context.Context, privateDir, _ string) (Grade, error) {
		graded++
		parts, err := os.ReadFile(filepath.Join(privateDir, PartsFile))
		if err != nil {
			return Grade{}, err
		}
		pub, priv := 0.6, 0.6
		if bytes.Equal(parts, first) {
			pub = 0.99
		}
		return Grade{Valid: true, Score: 0.7, Public: &pub, Private: &priv}, nil
	}
	tk, err := LoadWith(dir, LoadOptions{SplitKey: key})
	if err != nil {
		t.Fatal(err)
	}
	base, err := RunBaseline(context.Background(), copyRunner{}, grade, tk, sandbox.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if tk.SplitDraw != 1 || *base.Public != 0.6 || graded != 2 || bytes.Equal(tk.Parts, first) || !strings.Contains(tk.SplitDescription(), "draw 2") {
		t.Errorf("draw %d, public %v, graded %d times, description %q: want the second draw", tk.SplitDraw, *base.Public, graded, tk.SplitDescription())
	}
	files, _ := tk.PrivateFiles()
	if !bytes.Equal(files[PartsFile].Data, tk.Parts) {
		t.Error("the private tree's parts.csv is not the draw kept")
	}
	// Every draw leaves the public part at 0.99: the first is kept, and
	// the baseline fails naming the public part.
	always := func(_ context.Context, _, _ string) (Grade, error) {
		pub, priv := 0.99, 0.6
		return Grade{Valid: true, Score: 0.7, Public: &pub, Private: &priv}, nil
	}
	tk, _ = LoadWith(dir, LoadOptions{SplitKey: key})
	_, err = RunBaseline(context.Background(), copyRunner{}, always, tk, sandbox.Limits{})
	if err == nil || !strings.Contains(err.Error(), "public part") || tk.SplitDraw != 0 || !bytes.Equal(tk.Parts, first) {
		t.Errorf("got %v, draw %d: want the first draw and an error naming the public part", err, tk.SplitDraw)
	}
}
