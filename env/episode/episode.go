// Package episode is what the stages that let agents act on tasks share:
// rollout (the experts), evaluate (every method) and serve-env (one
// action per request). Each used to keep its own copy of these steps, and
// the copies drifted.
//
// Start with [Run], one episode of an agent on a task in a fresh
// environment, recorded as a trajectory and its steps. Around it:
//
//   - [Source] is the configuration of where the tasks come from (data
//     root, tasks and ideas datasets), embedded by rollout and evaluate.
//   - [Load] reads the tasks and ideas datasets and keeps the tasks of the
//     chosen splits ([SelectTasks]) with their kept ideas by pool.
//   - [Inputs.Plan] samples a trajectory's initial plan and [Seed] derives
//     its seed, so that any trajectory can be re-run alone.
//   - [RunKey] is the key a resumable run finds its pending version by.
//   - [Setup] finds the interpreter and starts the script runner once per
//     process, for every environment it makes (serve-env's too).
//   - [PromptsOf] reads how a rollout rendered its prompts from its steps
//     manifest, so that evaluation renders the same.
//   - [Lockstep] runs a trained policy's episodes in step, so that its
//     generation is batched (evaluate, and train ppo's learning curves).
package episode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/agents"
	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/sandbox"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// Inputs are the datasets a stage's episodes come from and the tasks it
// runs.
type Inputs struct {
	TasksM, IdeasM *datasets.Manifest
	// Tasks are the selected tasks, by id.
	Tasks []schemas.Task
	// Pools are the kept ideas of every task, by category.
	Pools map[string]agents.Pools
}

// Load reads the tasks and ideas datasets named by tasks and ideas (name
// or name/vN in st) and selects the tasks of splits (empty: every split)
// whose ids are in only (empty: all of them). No task selected is an
// error.
func Load(ctx context.Context, st store.Store, tasks, ideas string, splits, only []string) (*Inputs, error) {
	in := &Inputs{}
	var err error
	if in.TasksM, err = datasets.ResolveIn(ctx, st, tasks); err != nil {
		return nil, fmt.Errorf("tasks: %w", err)
	}
	all, err := datasets.ReadAll[schemas.Task](ctx, st, in.TasksM, schemas.Tasks)
	if err != nil {
		return nil, err
	}
	if in.IdeasM, err = datasets.ResolveIn(ctx, st, ideas); err != nil {
		return nil, fmt.Errorf("ideas: %w", err)
	}
	rows, err := datasets.ReadAll[schemas.Idea](ctx, st, in.IdeasM, schemas.Ideas)
	if err != nil {
		return nil, err
	}
	in.Pools = agents.BuildPools(rows)
	in.Tasks = SelectTasks(all, splits, only)
	if w := ReferenceSplitWarning(in.TasksM.URI, in.Tasks); w != "" {
		fmt.Fprintln(os.Stderr, w)
	}
	if len(in.Tasks) == 0 {
		what := "tasks"
		if len(splits) > 0 {
			what = strings.Join(splits, "/") + " tasks"
		}
		return nil, fmt.Errorf("no %s in %s (only=%v)", what, in.TasksM.URI, only)
	}
	return in, nil
}

// ReferenceSplitWarning says, for tasks read from uri, which were cut
// into their public and private parts by the reference split (task.yaml's
// seed, public: an agent can recompute which of its test rows are public)
// rather than by their data root's secret, and how to cut them again
// (internal/tasks, split.go); "" when none was. Such a tasks dataset
// (ingested before the data root had a split key) still works.
func ReferenceSplitWarning(uri string, tasks []schemas.Task) string {
	var ids []string
	for _, t := range tasks {
		if t.HasParts() && !strings.Contains(t.AnswerSplit, "keyed by the data root's secret") && !strings.HasPrefix(t.AnswerSplit, "given") {
			ids = append(ids, t.TaskID)
		}
	}
	if len(ids) == 0 {
		return ""
	}
	if len(ids) > 5 {
		ids = append(ids[:5], fmt.Sprintf("and %d more", len(ids)-5))
	}
	return fmt.Sprintf("warning: %s: the hidden answers of %s are cut into their public and private parts by the reference split (task.yaml's seed, which is public): an agent can tell which of its test rows are public. Ingest the tasks again (mlerl ingest tasks with the same --data) to cut them with the data root's own secret; later stages then read the new tasks version", uri, strings.Join(ids, ", "))
}

// SelectTasks returns the tasks of splits (empty: every split) whose ids
// are in only (empty: all), sorted by id.
func SelectTasks(all []schemas.Task, splits, only []string) []schemas.Task {
	var out []schemas.Task
	for _, t := range all {
		if (len(splits) == 0 || slices.Contains(splits, t.Split)) && (len(only) == 0 || slices.Contains(only, t.TaskID)) {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TaskID < out[j].TaskID })
	return out
}

// Plan samples the initial plan (ML-Agent: one kept idea from each of 1
// to 3 categories) of a trajectory of task with the trajectory's seed:
// the same seed gives the same plan.
func (in *Inputs) Plan(task string, seed int64) ([]schemas.Idea, error) {
	plan, err := agents.SamplePlan(rand.New(rand.NewPCG(uint64(seed), 1)), in.Pools[task])
	if err != nil {
		return nil, fmt.Errorf("task %s: %w (run `mlerl ingest ideas` for it)", task, err)
	}
	return plan, nil
}

// Seed derives a seed from what names it, joined with "/": a run seed
// and a trajectory id (a rollout's trajectories), or a namespace, the run
// seed, a task and an index (an evaluation's). Any trajectory can so be
// re-run alone with the same behaviour.
func Seed(parts ...any) int64 {
	h := fnv.New64a()
	for i, p := range parts {
		if i > 0 {
			h.Write([]byte("/"))
		}
		fmt.Fprint(h, p)
	}
	return int64(h.Sum64() & (1<<63 - 1))
}

// RunKey identifies a run over the tasks and ideas versions with cfg
// (whose fields that do not change the rows, such as workers, the caller
// zeroes) and extra lines (what else the rows depend on): a rerun with
// the same key resumes the run's pending version.
func RunKey(tasks, ideas *datasets.Manifest, cfg any, extra ...string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s v%d\n%s v%d\n%s", tasks.Name, tasks.Version, ideas.Name, ideas.Version, config.Canonical(cfg))
	for _, e := range extra {
		fmt.Fprintf(h, "\n%s", e)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Setup finds the task interpreter (cfg.Python, or the default) and starts
// the script runner that every environment made with the returned config
// shares: the warm worker (numpy, pandas and scikit-learn imported once)
// when warm is set and it starts, else cold processes, with cold told
// why, and, with cfg.ExecCacheOn, one env.ExecCache (a run equal to an
// earlier one is replayed), and one env.BlobMeter (what the snapshots add
// to the blob store, for the stage's closing line). The interpreter is set in the returned config because an empty one
// makes every env.New and restore probe Python (about 2 s). With
// cfg.EditorKind env.EditorLLM the environments' editor is an LLM editor
// on the stage's endpoint editorLLM (a stage without one passes the zero
// Config, and its config check refuses that editor). Call stop once no
// environment runs any more.
func Setup(ctx context.Context, cfg env.Config, editorLLM llm.Config, warm bool, cold func(error)) (_ env.Config, stop func() error, _ error) {
	if cfg.EditorKind == env.EditorLLM {
		c, err := llm.New(editorLLM)
		if err != nil {
			return cfg, nil, fmt.Errorf("env.editor %s: %w", env.EditorLLM, err)
		}
		cfg.Editor = env.LLMEditor{Client: c}
	}
	python, err := sandbox.FindPython(cfg.Python)
	if err != nil {
		return cfg, nil, err
	}
	runner := sandbox.New(ctx, python, warm, cold)
	cfg.Python, cfg.Runner = python, runner
	if cfg.ExecCache == nil {
		cfg.ExecCache = env.NewExecCacheFor(cfg)
	}
	if cfg.Blobs == nil {
		cfg.Blobs = &env.BlobMeter{}
	}
	return cfg, runner.Close, nil
}

// Job is one trajectory to run: its task, id, seed and initial plan.
type Job struct {
	Task schemas.Task
	ID   string
	Seed int64
	Plan []schemas.Idea
}

// PlanTexts returns the texts of the plan's ideas, what agents read.
func (j Job) PlanTexts() []string {
	texts := make([]string, len(j.Plan))
	for i, p := range j.Plan {
		texts[i] = p.Text
	}
	return texts
}

// Run lets agent act on j's task in a fresh environment made with cfg
// (see [Setup]) until the episode ends, and returns it recorded: the
// trajectory (expert names the agent, as trajectories.expert) and its
// steps, each with the snapshot of the state it acted in.
func Run(ctx context.Context, st store.Store, cfg env.Config, opts agents.Options, j Job, expert string, agent agents.Agent) (*agents.Episode, error) {
	e, err := env.New(ctx, cfg, env.SpecFromTask(j.Task), st)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	texts := j.PlanTexts()
	ids := make([]string, len(j.Plan))
	for i, p := range j.Plan {
		ids[i] = p.IdeaID
	}
	traj := schemas.Trajectory{TrajectoryID: j.ID, TaskID: j.Task.TaskID, Expert: expert, Seed: j.Seed,
		PlanIdeaIDs: ids, Plan: strings.Join(texts, "\n")}
	return agents.RunEpisode(ctx, e, agent, traj, texts, opts)
}

// PromptsKey is the key of a steps manifest's Extra that records how its
// rollout rendered prompts (an [agents.Prompts]).
const PromptsKey = "prompts"

// PromptsOf reads how the rollout that wrote the steps version m rendered
// its prompts: Extra "prompts", or, in a manifest written before that was
// recorded, the budgets of the rollout's config (full_budget,
// compact_budget) with the counter unknown (""). ok is false when m
// records neither.
func PromptsOf(m *datasets.Manifest) (p agents.Prompts, ok bool) {
	if v, found := m.Extra[PromptsKey]; found && decode(v, &p) && p.FullBudget > 0 && p.CompactBudget > 0 {
		return p, true
	}
	var c struct {
		FullBudget    int `json:"full_budget"`
		CompactBudget int `json:"compact_budget"`
	}
	if decode(m.Producer.Config, &c) && c.FullBudget > 0 && c.CompactBudget > 0 {
		return agents.Prompts{FullBudget: c.FullBudget, CompactBudget: c.CompactBudget}, true
	}
	return agents.Prompts{}, false
}

// decode converts v (a value read back from a manifest's JSON, or the
// value a stage put there) into out.
func decode(v, out any) bool {
	b, err := json.Marshal(v)
	return err == nil && json.Unmarshal(b, out) == nil
}
