package tasks

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// The hidden answers of every task have two parts, as a Kaggle
// competition's test set has a public and a private leaderboard: the
// public part is what the agent is told about and what rewards use, the
// private part is what evaluation reports. private/parts.csv says which
// row is which: a header `id,part` and one line per row of answers.csv,
// in the same order, with the row's id (answers.csv's first column) and
// `public` or `private`. Graders are given it as a third argument and
// score each part (see tasks/README.md, "The public and the private
// part").
const (
	PartsFile   = "parts.csv" // in private/
	PartPublic  = "public"
	PartPrivate = "private"
)

// Answer-split rules (task.yaml `answer_split`).
const (
	// SplitStrataHash orders the rows of each stratum (the label, for a
	// classification task with one label column; one stratum otherwise)
	// by sha256(seed + "/" + id), strata by label, and deals the rows of
	// that order alternately to the private and the public part: each
	// part holds half of every class (to one row), and which rows is fixed
	// by the ids and the seed alone.
	SplitStrataHash = "strata-hash-v1"
	// SplitTime is for forecasting: the test horizon in time order (ids
	// are time steps, compared as numbers), its earlier half public and
	// its later half private, as Kaggle's forecasting competitions score
	// the later period privately. The later half is further from the
	// training data, so a forecast scores worse there than on the public
	// half whoever made it; reports compare each part with the initial
	// script's score on the same part.
	SplitTime = "time-v1"
	// SplitGiven is a private/parts.csv written by the task's author.
	SplitGiven = "given"
	// SplitNone keeps the hidden answers whole: the agent is told the
	// score that evaluation reports (reports say so). For a task whose
	// answers are too few to cut, said so in its task.yaml.
	SplitNone = "none"

	// DefaultSplitSeed salts SplitStrataHash's hashes of the reference
	// split (see SplitKeyed).
	DefaultSplitSeed = "mlerl-answers-v1"
	// MinPartRows is the fewest rows a part may hold: a task with fewer
	// than 2*MinPartRows hidden answers needs more test rows.
	MinPartRows = 8
)

// The reference split and the keyed split. task.yaml's rule and seed, and
// the parts.csv committed beside them, are public (the suite's folders are
// in the repository): from them and the test ids in its workspace an agent
// could tell its public rows from its private ones, and learn about the
// private part from the public part's scores (score only its public rows
// with probes, say). They are the reference split: what the suite's
// per-part m_best were measured on (tasks/README.md). A data root's tasks
// are cut by the keyed split instead ([SplitAnswersKeyed], ingest's
// LoadOptions.SplitKey): the same rule, its hash keyed by a secret of the
// data root that nothing in a workspace holds (HMAC-SHA256 of the task id
// and the row id), and for forecasting (whose reference halves, earlier
// and later, need no key to recompute) the horizon dealt in consecutive
// pairs, one row of each pair public by the keyed hash: both parts span
// the horizon alike. Without the key, no row's part can be told from
// anything an agent reads.

// DefaultSplitRule is the rule a task without task.yaml's answer_split
// gets: SplitTime for forecasting, SplitStrataHash otherwise.
func DefaultSplitRule(taskType string) string {
	if taskType == "forecasting" {
		return SplitTime
	}
	return SplitStrataHash
}

// stratifies reports whether SplitStrataHash stratifies a task's rows by
// its label: classification with one label column (a multi-label task's
// rows have several labels and are not stratified).
func stratifies(taskType string, labels int) bool {
	return labels == 1 && (taskType == "binary-classification" || taskType == "multiclass-classification")
}

// needsBothClasses reports whether a metric is undefined on a part with
// one class: roc_auc, and log_loss as the graders compute it for 0/1
// labels (defined, but a part of one class says nothing of calibration).
func needsBothClasses(metric string) bool { return metric == "roc_auc" || metric == "log_loss" }

// answerRows reads answers.csv: its header and its rows (each at least
// two fields: the id and a label).
func answerRows(answers []byte) (header []string, rows [][]string, err error) {
	r := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(answers, []byte("\ufeff"))))
	r.FieldsPerRecord = 0
	header, err = r.Read()
	if err == io.EOF {
		return nil, nil, errors.New("is empty: want a header (the id column, then the answer columns) and one row per test id")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("is not a readable CSV: %v", err)
	}
	if len(header) < 2 {
		return nil, nil, fmt.Errorf("has %d column(s) (%q); want the id column first, then the answer column(s)", len(header), header)
	}
	seen := map[string]int{}
	for line := 2; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("is not a readable CSV: %v", err)
		}
		id := strings.TrimSpace(rec[0])
		if id == "" {
			return nil, nil, fmt.Errorf("line %d: empty id", line)
		}
		if prev, ok := seen[id]; ok {
			return nil, nil, fmt.Errorf("line %d: id %q repeats line %d (ids must be unique)", line, id, prev)
		}
		seen[id] = line
		rows = append(rows, rec)
	}
	return header, rows, nil
}

// SplitAnswers returns the parts.csv of answers.csv by rule (SplitTime or
// SplitStrataHash; SplitGiven has no computation) and seed (empty:
// DefaultSplitSeed), for a task of taskType scored by metric. It fails,
// saying how to fix it, when a part would hold fewer than MinPartRows
// rows or, for roc_auc and log_loss, one class only.
func SplitAnswers(answers []byte, rule, seed, taskType, metric string) ([]byte, error) {
	if seed == "" {
		seed = DefaultSplitSeed
	}
	return splitAnswers(answers, rule, false, func(id string) string {
		h := sha256.Sum256([]byte(seed + "/" + id))
		return hex.EncodeToString(h[:])
	}, taskType, metric)
}

// SplitAnswersKeyed returns the parts.csv of task taskID's answers.csv by
// rule keyed by key, a data root's secret (see the comment above
// DefaultSplitRule), in its draw-th draw (0 first): for SplitStrataHash the
// rows are ordered by HMAC-SHA256(key, taskID + "/" + id) (draw k > 0:
// taskID + "#k/" + id); for SplitTime the horizon in time order is dealt
// in consecutive pairs, the row of each pair with the smaller keyed hash
// public (an odd last row private).
func SplitAnswersKeyed(answers []byte, rule, taskID string, draw int, key []byte, taskType, metric string) ([]byte, error) {
	if len(key) < 16 {
		return nil, fmt.Errorf("the answer split key has %d bytes: want at least 16", len(key))
	}
	prefix := taskID + "/"
	if draw > 0 {
		prefix = fmt.Sprintf("%s#%d/", taskID, draw)
	}
	return splitAnswers(answers, rule, true, func(id string) string {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(prefix + id))
		return hex.EncodeToString(m.Sum(nil))
	}, taskType, metric)
}

// SplitDraws is how many draws of the keyed split ingest tries for a task
// whose m_best (measured on all the hidden answers, taken by both parts)
// does not beat the initial script's score on a part of the first: rewards
// and reported headroom scale by that gap. The draws depend on the key,
// the answers and the initial script's submission alone, so a task's parts
// stay the same from one ingest to the next.
const SplitDraws = 8

// splitAnswers cuts answers by rule, hashing ids with hash; keyed deals
// SplitTime's horizon in pairs rather than halves.
func splitAnswers(answers []byte, rule string, keyed bool, hash func(id string) string, taskType, metric string) ([]byte, error) {
	header, rows, err := answerRows(answers)
	if err != nil {
		return nil, fmt.Errorf("%s %w", AnswersFile, err)
	}
	n := len(rows)
	if n < 2*MinPartRows {
		return nil, fmt.Errorf("%s has %d rows: each part of the hidden answers needs at least %d, so the task needs at least %d test rows (give it more from its source data, or set answer_split: %s to keep the answers whole, and then every reported score is one the agent was told)", AnswersFile, n, MinPartRows, 2*MinPartRows, SplitNone)
	}
	order := make([]int, n) // rows in the rule's order
	for i := range order {
		order[i] = i
	}
	part := make([]string, n)
	switch rule {
	case SplitTime:
		ts := make([]float64, n)
		for i, rec := range rows {
			t, err := strconv.ParseFloat(strings.TrimSpace(rec[0]), 64)
			if err != nil || math.IsNaN(t) || math.IsInf(t, 0) {
				return nil, fmt.Errorf("%s line %d: id %q is not a number: split %s orders the test horizon by its ids, which must be time steps (or use answer_split: %s)", AnswersFile, i+2, rec[0], SplitTime, SplitStrataHash)
			}
			ts[i] = t
		}
		sort.SliceStable(order, func(a, b int) bool { return ts[order[a]] < ts[order[b]] })
		for k, i := range order {
			part[i] = PartPrivate
			if !keyed && k < n/2 {
				part[i] = PartPublic
			}
		}
		if keyed {
			for k := 0; k+1 < n; k += 2 {
				a, b := order[k], order[k+1]
				if hash(strings.TrimSpace(rows[b][0])) < hash(strings.TrimSpace(rows[a][0])) {
					a = b
				}
				part[a] = PartPublic
			}
		}
	case SplitStrataHash:
		strata := stratifies(taskType, len(header)-1)
		keys := make([]string, n)
		for i, rec := range rows {
			keys[i] = hash(strings.TrimSpace(rec[0]))
		}
		sort.SliceStable(order, func(a, b int) bool {
			i, j := order[a], order[b]
			if strata {
				if li, lj := strings.TrimSpace(rows[i][1]), strings.TrimSpace(rows[j][1]); li != lj {
					return li < lj
				}
			}
			return keys[i] < keys[j]
		})
		for k, i := range order {
			part[i] = PartPrivate
			if k%2 == 1 {
				part[i] = PartPublic
			}
		}
	default:
		return nil, fmt.Errorf("answer_split %q cannot be computed: want %s or %s (or %s with a private/%s of your own)", rule, SplitStrataHash, SplitTime, SplitGiven, PartsFile)
	}
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.Write([]string{"id", "part"})
	for i, rec := range rows {
		w.Write([]string{strings.TrimSpace(rec[0]), part[i]})
	}
	w.Flush()
	if err := CheckParts(answers, b.Bytes(), metric); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// PartCounts is how many rows each part holds.
type PartCounts struct{ Public, Private int }

// CheckParts checks parts.csv against answers.csv: the header `id,part`,
// one line per answers row with the same id in the same order, parts
// `public` or `private`, at least MinPartRows rows each and, for roc_auc
// and log_loss, both classes in each part.
func CheckParts(answers, parts []byte, metric string) error {
	_, rows, err := answerRows(answers)
	if err != nil {
		return fmt.Errorf("%s %w", AnswersFile, err)
	}
	_, err = partsOf(rows, parts, metric)
	return err
}

// CountParts returns how many rows each part of parts.csv holds, after
// the checks of CheckParts.
func CountParts(answers, parts []byte, metric string) (PartCounts, error) {
	_, rows, err := answerRows(answers)
	if err != nil {
		return PartCounts{}, fmt.Errorf("%s %w", AnswersFile, err)
	}
	return partsOf(rows, parts, metric)
}

func partsOf(rows [][]string, parts []byte, metric string) (PartCounts, error) {
	fail := func(format string, args ...any) (PartCounts, error) {
		return PartCounts{}, fmt.Errorf(PartsFile+" "+format, args...)
	}
	r := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(parts, []byte("\ufeff"))))
	r.FieldsPerRecord = 2
	recs, err := r.ReadAll()
	if err != nil {
		return fail("is not a CSV of two columns: %v", err)
	}
	if len(recs) == 0 || strings.TrimSpace(recs[0][0]) != "id" || strings.TrimSpace(recs[0][1]) != "part" {
		return fail("must start with the header id,part")
	}
	recs = recs[1:]
	if len(recs) != len(rows) {
		return fail("has %d rows and %s %d: want one line per answers row, in the same order", len(recs), AnswersFile, len(rows))
	}
	var c PartCounts
	classes := map[string]map[string]bool{PartPublic: {}, PartPrivate: {}}
	for i, rec := range recs {
		id, p := strings.TrimSpace(rec[0]), strings.TrimSpace(rec[1])
		if want := strings.TrimSpace(rows[i][0]); id != want {
			return fail("line %d: id %q, but %s line %d has id %q: list the answers' ids in their order", i+2, id, AnswersFile, i+2, want)
		}
		switch p {
		case PartPublic:
			c.Public++
		case PartPrivate:
			c.Private++
		default:
			return fail("line %d: part %q: want %s or %s", i+2, p, PartPublic, PartPrivate)
		}
		classes[p][strings.TrimSpace(rows[i][1])] = true
	}
	if c.Public < MinPartRows || c.Private < MinPartRows {
		return fail("gives %d public and %d private rows: each part needs at least %d (give the task more test rows)", c.Public, c.Private, MinPartRows)
	}
	if needsBothClasses(metric) {
		for _, p := range []string{PartPublic, PartPrivate} {
			if len(classes[p]) < 2 {
				return fail("gives the %s part one class only: %s needs both classes in each part", p, metric)
			}
		}
	}
	return c, nil
}
