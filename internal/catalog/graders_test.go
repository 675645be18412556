package catalog

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
)

// TestGraderBestAndConstant: every task's grader gives its own hidden
// answers the metric's best score, and a constant submission (the
// majority label per column, 0.5 for probabilities, the mean for
// regression) a clearly worse one: a grader that rewards a submission
// carrying no information, or does not reward the truth, fails here.
func TestGraderBestAndConstant(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping Python runs in -short mode")
	}
	py := python(t)
	suite := loadSuite(t)
	tmp := t.TempDir()
	var reqs []map[string]string
	for _, st := range suite {
		dir, _ := filepath.Abs(st.dir)
		answers := filepath.Join(dir, "private", "answers.csv")
		constant, err := constantSubmission(answers, st.Metric)
		if err != nil {
			t.Fatalf("%s: %v", st.ID, err)
		}
		p := filepath.Join(tmp, st.ID+"-constant.csv")
		if err := os.WriteFile(p, constant, 0o644); err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, map[string]string{"kind": "grade", "dir": dir, "sub": answers}, map[string]string{"kind": "grade", "dir": dir, "sub": p})
	}
	out, err := runBatch(py, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for k, st := range suite {
		var best, constant gradeResult
		if err := json.Unmarshal([]byte(out[2*k].Out), &best); err != nil || out[2*k].TB != "" {
			t.Fatalf("%s answers: grader printed %q (%v)\n%s", st.ID, out[2*k].Out, err, out[2*k].TB)
		}
		if err := json.Unmarshal([]byte(out[2*k+1].Out), &constant); err != nil || out[2*k+1].TB != "" {
			t.Fatalf("%s constant: grader printed %q (%v)\n%s", st.ID, out[2*k+1].Out, err, out[2*k+1].TB)
		}
		want := 1.0 // accuracy, roc_auc, f1_macro
		if st.Direction == "lower" {
			want = 0 // rmse, mae, log_loss (clipped probabilities of exactly 0 and 1)
		}
		if !best.Valid || math.Abs(best.Score-want) > 1e-6 {
			t.Errorf("%s (%s): the answers themselves score %v (valid %v, %s), want %v", st.ID, st.Metric, best.Score, best.Valid, best.Reason, want)
		}
		// Each part of the hidden answers (private/parts.csv) is scored
		// too: the answers are best on both, a constant worse on both.
		if best.Public == nil || best.Private == nil || math.Abs(*best.Public-want) > 1e-6 || math.Abs(*best.Private-want) > 1e-6 {
			t.Errorf("%s (%s): the answers score %v on the public and %v on the private part, want %v on both", st.ID, st.Metric, best.Public, best.Private, want)
		}
		for _, p := range []*float64{constant.Public, constant.Private} {
			if p == nil || (st.Direction != "lower" && *p > want-1e-9) || (st.Direction == "lower" && *p < want+1e-9) {
				t.Errorf("%s (%s): a constant submission scores %v on a part, want worse than %v", st.ID, st.Metric, p, want)
			}
		}
		// Worse by at least 5% of the best's scale: 0.05 for scores in
		// [0, 1]; for errors, strictly positive.
		worse := constant.Score < want-0.05
		if st.Direction == "lower" {
			worse = constant.Score > want+1e-3
		}
		if !constant.Valid || !worse {
			t.Errorf("%s (%s): a constant submission scores %v (valid %v, %s), want clearly worse than %v", st.ID, st.Metric, constant.Score, constant.Valid, constant.Reason, want)
		}
	}
}

// constantSubmission is answers.csv with every prediction column made
// constant: 0.5 for a probability metric, the column's mean for an error
// metric, its most frequent value (the smallest on a tie) otherwise.
func constantSubmission(answers, metric string) ([]byte, error) {
	b, err := os.ReadFile(answers)
	if err != nil {
		return nil, err
	}
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil || len(rows) < 2 {
		return nil, fmt.Errorf("%s: %v (%d rows)", answers, err, len(rows))
	}
	for c := 1; c < len(rows[0]); c++ {
		v := ""
		switch metric {
		case "roc_auc", "log_loss":
			v = "0.5"
		case "rmse", "mae":
			sum := 0.0
			for _, r := range rows[1:] {
				x, err := strconv.ParseFloat(r[c], 64)
				if err != nil {
					return nil, fmt.Errorf("%s: column %s: %v", answers, rows[0][c], err)
				}
				sum += x
			}
			v = strconv.FormatFloat(sum/float64(len(rows)-1), 'g', -1, 64)
		default:
			count := map[string]int{}
			for _, r := range rows[1:] {
				count[r[c]]++
			}
			keys := make([]string, 0, len(count))
			for k := range count {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				if v == "" || count[k] > count[v] {
					v = k
				}
			}
		}
		for _, r := range rows[1:] {
			r[c] = v
		}
	}
	var out bytes.Buffer
	w := csv.NewWriter(&out)
	if err := w.WriteAll(rows); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
