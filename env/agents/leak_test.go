package agents

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// leakScript is a plain-Python threshold classifier (no numpy: a run is
// one interpreter start).
const leakScript = `# === imports ===
import csv
# === end imports ===
# === data ===
rows = list(csv.DictReader(open("train.csv")))
X_train = [float(r["x"]) for r in rows]
y_train = [int(r["y"]) for r in rows]
test = list(csv.DictReader(open("test.csv")))
# === end data ===
# === model ===
threshold = 0.0
# === end model ===
# === training ===
pass
# === end training ===
# === evaluate ===
acc = sum((x > threshold) == bool(y) for x, y in zip(X_train, y_train)) / len(y_train)
print(f"VAL_METRIC accuracy {acc:.6f}")
with open("submission.csv", "w") as f:
    f.write("id,y\n")
    for r in test:
        f.write(f"{r['id']},{int(float(r['x']) > threshold)}\n")
# === end evaluate ===
`

// leakGrader scores accuracy on all rows and, given parts.csv, on each part.
const leakGrader = `import csv, json, sys
try:
    sub = {r["id"]: r["y"] for r in csv.DictReader(open(sys.argv[1]))}
except Exception as e:
    print(json.dumps({"valid": False, "reason": "unreadable: %s" % e}))
    sys.exit(0)
ans = [(r["id"], r["y"]) for r in csv.DictReader(open(sys.argv[2]))]
if set(sub) != {i for i, _ in ans}:
    print(json.dumps({"valid": False, "reason": "ids differ"}))
    sys.exit(0)
def acc(rows):
    return sum(sub[i] == y for i, y in rows) / len(rows)
out = {"valid": True, "score": acc(ans)}
if len(sys.argv) == 4:
    part = [r["part"] for r in csv.DictReader(open(sys.argv[3]))]
    for p in ("public", "private"):
        out[p] = acc([a for a, q in zip(ans, part) if q == p])
print(json.dumps(out))
`

// leakTask stores a task whose 24 hidden answers have 11 public and 13
// private rows labelled by different rules (public: x > 0.5, private:
// x > 0.3), so that a public score is k/11 and a private one j/13: the two
// never print alike, and a printed private score is a leak.
func leakTask(t *testing.T, st store.Store) schemas.Task {
	t.Helper()
	var train, test, ans, parts bytes.Buffer
	train.WriteString("x,y\n")
	test.WriteString("id,x\n")
	ans.WriteString("id,y\n")
	parts.WriteString("id,part\n")
	for i := 0; i < 24; i++ {
		x := float64(i) / 24
		fmt.Fprintf(&train, "%.4f,%d\n", x+0.01, b2i(x > 0.5))
		fmt.Fprintf(&test, "t%d,%.4f\n", i, x)
		part, y := "private", b2i(x > 0.3)
		if i%2 == 1 && i < 22 {
			part, y = "public", b2i(x > 0.5)
		}
		fmt.Fprintf(&ans, "t%d,%d\n", i, y)
		fmt.Fprintf(&parts, "t%d,%s\n", i, part)
	}
	ctx := context.Background()
	ws, err := blobs.PutTree(ctx, st, blobs.Files{"train.py": {Data: []byte(leakScript), Mode: 0o644},
		"train.csv": {Data: train.Bytes(), Mode: 0o644}, "test.csv": {Data: test.Bytes(), Mode: 0o644}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := blobs.PutTree(ctx, st, blobs.Files{"grade.py": {Data: []byte(leakGrader), Mode: 0o644},
		"answers.csv": {Data: ans.Bytes(), Mode: 0o644}, "parts.csv": {Data: parts.Bytes(), Mode: 0o644}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The initial threshold 0 predicts 1 everywhere: public 5/11 (rows
	// 13..21 odd are positive), private 9/13 (x > 0.3: 8..23 even).
	pubInit, privInit := 5.0/11, 9.0/13
	pubBest, privBest := 1.0, 1.0
	return schemas.Task{TaskID: "leak", Title: "Threshold", Description: "Classify x.", Modality: "tabular", TaskType: "binary-classification",
		Metric: "accuracy", Direction: schemas.HigherIsBetter, MInit: 0.5, MBest: 1, TimeLimitS: 20, WorkspaceTree: ws, PrivateTree: priv,
		MInitPublic: &pubInit, MInitPrivate: &privInit, MBestPublic: &pubBest, MBestPrivate: &privBest}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// thresholdEditor carries out the plan's two ideas on leakScript.
type thresholdEditor struct{}

func (thresholdEditor) Edit(_ context.Context, script, ins string) (string, llm.Usage, error) {
	for idea, to := range map[string]string{"raise the threshold": "0.5", "lower the threshold": "0.2", "overshoot the threshold": "0.7"} {
		if strings.Contains(strings.ToLower(ins), idea) {
			i := strings.Index(script, "threshold = ")
			j := strings.Index(script[i:], "\n")
			return script[:i] + "threshold = " + to + script[i+j:], llm.Usage{}, nil
		}
	}
	return "", llm.Usage{}, fmt.Errorf("unknown instruction %q: %w", ins, env.ErrInvalidEdit)
}

// recorder keeps every text and number an agent is given.
type recorder struct {
	inner Agent
	texts []string
}

func (r *recorder) Act(ctx context.Context, obs Observation) (string, llm.Usage, error) {
	r.texts = append(r.texts, obs.Full, obs.Compact)
	if l := obs.Last; l != nil {
		r.texts = append(r.texts, l.Observation, l.Detail, fmtPtr(l.MetricAfter), fmtPtr(l.BestBefore), fmt.Sprint(l.MetricBefore), fmt.Sprint(l.Reward.Total))
	}
	r.texts = append(r.texts, fmt.Sprint(obs.State.MInit, obs.State.Current), fmtPtr(obs.State.Best))
	for _, h := range obs.State.History {
		r.texts = append(r.texts, h.Observation, fmtPtr(h.MetricAfter), fmt.Sprint(h.Reward))
	}
	return r.inner.Act(ctx, obs)
}

func fmtPtr(p *float64) string {
	if p == nil {
		return ""
	}
	return fmt.Sprint(*p)
}

// spellings are the ways a score may be printed.
func spellings(v float64) []string {
	return []string{fmt.Sprintf("%.4f", v), fmt.Sprintf("%.3f", v), strconv.FormatFloat(v, 'g', -1, 64), fmt.Sprintf("%.6f", v)}
}

// TestNoPrivateScoreReachesTheAgent drives episodes of the scripted expert
// and the random agent on a task whose hidden answers have parts, and
// searches every prompt, observation and number the agent was given for
// any score the private part can take: none may appear. With feedback
// public the public scores do appear; with feedback none no hidden-test
// score, public or private, and no reward does.
func TestNoPrivateScoreReachesTheAgent(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	var private, public []string
	for j := 1; j < 13; j++ {
		private = append(private, spellings(float64(j)/13)...)
	}
	for k := 1; k < 11; k++ {
		public = append(public, fmt.Sprintf("%.4f", float64(k)/11))
	}
	plan := []string{"Raise the threshold", "Overshoot the threshold", "Lower the threshold"}
	for _, feedback := range []string{env.FeedbackPublic, env.FeedbackNone} {
		for _, f := range []Factory{Scripted{SlipRate: 0.2}, Random{}} {
			t.Run(feedback+"/"+f.Name(), func(t *testing.T) {
				st := store.NewLocal(t.TempDir())
				task := leakTask(t, st)
				cfg := env.DefaultConfig()
				cfg.Python, cfg.Runner, cfg.Editor, cfg.WorkDir = python, sandbox.NewCold(python), thresholdEditor{}, t.TempDir()
				cfg.Instrument, cfg.MaxSteps, cfg.MaxTime, cfg.Feedback = false, 14, 5*time.Minute, feedback
				var texts []string
				privSeen := map[float64]bool{}
				for seed := int64(1); seed <= 2; seed++ {
					e, err := env.New(context.Background(), cfg, env.SpecFromTask(task), st)
					if err != nil {
						t.Fatal(err)
					}
					rec := &recorder{inner: f.Episode(plan, seed)}
					ep, err := RunEpisode(context.Background(), e, rec, schemas.Trajectory{TrajectoryID: fmt.Sprint(seed), TaskID: task.TaskID}, plan, NewOptions(6000, 448, cfg.MaxSteps))
					e.Close()
					if err != nil {
						t.Fatal(err)
					}
					texts = append(texts, rec.texts...)
					for _, s := range ep.Steps {
						texts = append(texts, s.State, s.CompactState, s.Observation)
					}
					if ep.Private == nil {
						t.Fatal("the episode recorded no private scores")
					}
					privSeen[ep.Private.Final] = true
				}
				all := strings.Join(texts, "\n")
				for _, p := range private {
					if strings.Contains(all, p) {
						i := strings.Index(all, p)
						t.Fatalf("a private score %s reached the agent: ...%s...", p, all[max(0, i-120):min(len(all), i+40)])
					}
				}
				shown := 0
				for _, p := range public {
					if strings.Contains(all, p) {
						shown++
					}
				}
				switch {
				case feedback == env.FeedbackPublic && shown == 0:
					t.Error("no public score reached the agent with feedback public: the search would find nothing")
				case feedback == env.FeedbackNone && shown > 0:
					t.Errorf("%d public scores reached the agent with feedback none", shown)
				case feedback == env.FeedbackNone && strings.Contains(all, "reward "):
					t.Error("a reward reached the agent with feedback none")
				}
				if f.Name() == "scripted" && len(privSeen) == 1 && privSeen[9.0/13] {
					t.Errorf("the expert's final private scores %v never left m_init's: the episodes did not exercise the parts", privSeen)
				}
			})
		}
	}
}
