// Package schemas describes every dataset the mlerl pipeline writes: one Go
// row type per dataset, its Parquet schema (derived from the struct tags) and
// its name and version.
//
// Start with [All], which lists every [Info]. Stages never share Go types
// other than these: a stage's output is a dataset of one of these rows, and
// the next stage reads it back through internal/datasets.
//
// Versioning: each file carries "mlerl.schema" and "mlerl.schema_version"
// in its Parquet key-value metadata. A minor version adds optional columns
// only; a reader refuses a file whose major version it does not know
// ([Info.Check]).
//
// Nullability: a pointer field tagged ",optional" is a nullable column
// (nil <-> null). A non-pointer field tagged ",optional" (columns added in a
// minor version) stores its zero value as null, so an Arrow reader must
// read null there as 0. Slices are tagged ",list" so Arrow sees LIST
// columns (embedding: list<float32>).
package schemas

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Metadata keys written into every Parquet file's key-value metadata.
const (
	MetaSchema  = "mlerl.schema"
	MetaVersion = "mlerl.schema_version"
)

// ErrVersion is wrapped by errors about schema names or versions a reader
// cannot accept.
var ErrVersion = errors.New("unsupported schema version")

// Info names a dataset schema and its version ("major.minor").
type Info struct {
	Name    string
	Version string
	// Row is a zero value of the row type, used to derive the Parquet schema.
	Row any
	// Doc is one line saying what a row is.
	Doc string
}

// Major returns the major component of the version.
func (i Info) Major() int {
	m, _ := strconv.Atoi(strings.SplitN(i.Version, ".", 2)[0])
	return m
}

// Check reports whether a file that declares schema name and version can be
// read as i. It fails for another schema, a missing or malformed version or
// a different major version, and says what to do; a newer minor version is
// accepted (it only adds optional columns).
func (i Info) Check(name, version string) error {
	if name == "" {
		return fmt.Errorf("no %q metadata: %w (not written by mlerl; point the stage at a %s dataset)", MetaSchema, ErrVersion, i.Name)
	}
	if name != i.Name {
		return fmt.Errorf("schema %q found, %q expected: %w (point the stage at a %s dataset)", name, i.Name, ErrVersion, i.Name)
	}
	major, minor, ok := strings.Cut(version, ".")
	m, err := strconv.Atoi(major)
	if ok {
		_, err2 := strconv.Atoi(minor)
		err = errors.Join(err, err2)
	}
	if version == "" || err != nil || m < 0 {
		return fmt.Errorf("schema %s: version %q is not major.minor: %w (the file was not written by mlerl, or is damaged)", name, version, ErrVersion)
	}
	if m != i.Major() {
		return fmt.Errorf("schema %s version %s is not readable by this mlerl (knows %s): %w; use an mlerl that knows %s %d.x, or re-create the dataset with this one", name, version, i.Version, ErrVersion, name, m)
	}
	return nil
}

// The schemas, in pipeline order.
var (
	Tasks        = Info{Name: "tasks", Version: "1.3", Row: Task{}, Doc: "one ML task: its metric, direction, m_init and m_best, and where its files are"}
	Ideas        = Info{Name: "ideas", Version: "1.0", Row: Idea{}, Doc: "one candidate improvement idea with its embedding and diversity-filter verdict"}
	Trajectories = Info{Name: "trajectories", Version: "1.0", Row: Trajectory{}, Doc: "one expert (or evaluated) episode on one task"}
	Steps        = Info{Name: "steps", Version: "1.0", Row: Step{}, Doc: "one step of a trajectory: the state the agent saw, its action and what followed (the expert states)"}
	SFTExamples  = Info{Name: "sft_examples", Version: "1.1", Row: SFTExample{}, Doc: "one (prompt, response) pair for supervised fine-tuning"}
	RLStates     = Info{Name: "rl_states", Version: "1.0", Row: RLState{}, Doc: "one restorable expert state for step-wise RL"}
	EvalResults  = Info{Name: "eval_results", Version: "1.3", Row: EvalResult{}, Doc: "one evaluation trajectory's final score for one method on one task"}
	Experiments  = Info{Name: "experiments", Version: "1.7", Row: ExperimentRow{}, Doc: "one evaluation trajectory of one arm and seed of an experiment grid, with the arm's costs"}
)

// All lists every schema, in pipeline order.
func All() []Info {
	return []Info{Tasks, Ideas, Trajectories, Steps, SFTExamples, RLStates, EvalResults, Experiments}
}

// ByName returns the schema with the given name.
func ByName(name string) (Info, bool) {
	for _, i := range All() {
		if i.Name == name {
			return i, true
		}
	}
	return Info{}, false
}

// Direction values of a task's metric.
const (
	HigherIsBetter = "higher"
	LowerIsBetter  = "lower"
)

// Split values: held-in tasks are for training, held-out ones only for evaluation.
const (
	HeldIn  = "held-in"
	HeldOut = "held-out"
)

// Idea categories (ML-Agent).
const (
	CategoryData     = "data"
	CategoryModel    = "model"
	CategoryLearning = "learning"
)

// Categories lists the three idea categories in their canonical order.
var Categories = []string{CategoryData, CategoryModel, CategoryLearning}

// Task is a row of the tasks dataset.
type Task struct {
	TaskID    string `parquet:"task_id"`
	Title     string `parquet:"title"`
	Modality  string `parquet:"modality"`  // tabular, image, text, time-series, graph...
	TaskType  string `parquet:"task_type"` // classification, regression, forecasting...
	Metric    string `parquet:"metric"`    // accuracy, roc_auc, log_loss, rmse...
	Direction string `parquet:"direction"` // HigherIsBetter or LowerIsBetter
	// MInit is the grader's score of the initial script's submission on
	// the hidden labels: what rewards and delta_r compare against.
	MInit     float64 `parquet:"m_init"`
	MInitTest float64 `parquet:"m_init_test,optional"` // the same grader score (kept for readers of 1.0)
	// MInitValid is the initial script's own VAL_METRIC (what the agent reads).
	MInitValid  float64 `parquet:"m_init_valid,optional"`
	MBest       float64 `parquet:"m_best"`
	MBestSource string  `parquet:"m_best_source"`
	Split       string  `parquet:"split"`
	// TimeLimitS bounds one execution of the task's script.
	TimeLimitS float64 `parquet:"time_limit_s"`
	// BaselineDurationS is the measured wall time of the initial script.
	BaselineDurationS float64 `parquet:"baseline_duration_s"`
	Description       string  `parquet:"description"`
	// WorkspaceTree and PrivateTree reference content-addressed trees
	// (internal/blobs) in the same data root: what the agent sees, and the
	// hidden labels plus grader.
	WorkspaceTree string `parquet:"workspace_tree"`
	PrivateTree   string `parquet:"private_tree"`
	Source        string `parquet:"source"` // builtin, mlebench, mlagentbench
	// Initial says what the workspace's train.py is: "" or
	// InitialGenerated, a sectioned script (the built-in suite's, or the
	// importer's generated baseline), or InitialOriginal, the benchmark's
	// own unsectioned script, which only an LLM editor can edit (1.2).
	Initial string `parquet:"initial,optional"`
	// Since 1.3: the hidden answers' two parts (private/parts.csv). The
	// environment shows and rewards the public part's scores only;
	// evaluation reports the private part's. AnswerSplit says how they
	// were cut (rule, seed, rows per part); m_init and m_best on each
	// part (m_best's parts are m_best itself where task.yaml gives no
	// per-part value). Nil in rows written before 1.3, whose tasks were
	// scored on all their hidden answers.
	AnswerSplit  string   `parquet:"answer_split,optional"`
	MInitPublic  *float64 `parquet:"m_init_public,optional"`
	MInitPrivate *float64 `parquet:"m_init_private,optional"`
	MBestPublic  *float64 `parquet:"m_best_public,optional"`
	MBestPrivate *float64 `parquet:"m_best_private,optional"`
	// WorkspaceBytes and WorkspaceFiles are the task's own workspace quota
	// (task.yaml's workspace_bytes and workspace_files; 0, and absent
	// before 1.3: the stage's env.workspace_bytes and env.workspace_files).
	WorkspaceBytes int64 `parquet:"workspace_bytes,optional"`
	WorkspaceFiles int64 `parquet:"workspace_files,optional"`
}

// HasParts reports whether the row's task was ingested with a public and
// a private part of its hidden answers (tasks 1.3).
func (t Task) HasParts() bool {
	return t.MInitPublic != nil && t.MInitPrivate != nil && t.MBestPublic != nil && t.MBestPrivate != nil
}

// Public returns m_init and m_best on the public part: what the agent is
// told and what rewards scale by. A row without parts gives its scores on
// all hidden answers.
func (t Task) Public() (mInit, mBest float64) {
	if t.HasParts() {
		return *t.MInitPublic, *t.MBestPublic
	}
	return t.graded(), t.MBest
}

// Private returns m_init and m_best on the private part: what evaluation
// reports. A row without parts gives its scores on all hidden answers.
func (t Task) Private() (mInit, mBest float64) {
	if t.HasParts() {
		return *t.MInitPrivate, *t.MBestPrivate
	}
	return t.graded(), t.MBest
}

// graded is the grader's score of the initial submission on all hidden
// answers (m_init_test when the row has it, else m_init).
func (t Task) graded() float64 {
	if t.MInitTest != 0 {
		return t.MInitTest
	}
	return t.MInit
}

// Parts of the hidden answers a reported score was computed on
// (EvalResult.ScoredOn, ExperimentRow.ScoredOn).
const (
	ScoredPrivate = "private" // the private part, which the agent never saw a score of
	ScoredAll     = "all"     // every hidden answer: a task ingested without parts (before tasks 1.3)
)

// Initial scripts of a task (Task.Initial).
const (
	InitialGenerated = "generated"
	InitialOriginal  = "original"
)

// Idea is a row of the ideas dataset.
type Idea struct {
	IdeaID   string `parquet:"idea_id"`
	TaskID   string `parquet:"task_id"`
	Category string `parquet:"category"`
	Text     string `parquet:"text"`
	// Source is "catalog" or "llm:<model>".
	Source string `parquet:"source"`
	// Edit is the concrete edit (JSON) the offline editor applies; empty for
	// LLM ideas, which an LLM editor carries out.
	Edit      string    `parquet:"edit"`
	Embedding []float32 `parquet:"embedding,list"`
	Kept      bool      `parquet:"kept"`
	// Rank is the selection order among kept ideas (0 first), -1 if dropped.
	Rank int32 `parquet:"rank"`
	// NearestKeptSim is the cosine similarity to the closest kept idea (other than itself).
	NearestKeptSim float32 `parquet:"nearest_kept_sim"`
}

// Trajectory is a row of the trajectories dataset.
type Trajectory struct {
	TrajectoryID string   `parquet:"trajectory_id"`
	TaskID       string   `parquet:"task_id"`
	Expert       string   `parquet:"expert"` // scripted, llm:<model>, policy:<ckpt>...
	Seed         int64    `parquet:"seed"`
	PlanIdeaIDs  []string `parquet:"plan_idea_ids,list"`
	Plan         string   `parquet:"plan"` // the plan as the expert read it
	NumSteps     int32    `parquet:"num_steps"`
	MInit        float64  `parquet:"m_init"`
	// FinalMetric is the validation metric of the final workspace; null when
	// no valid run happened.
	FinalMetric *float64 `parquet:"final_metric,optional"`
	BestMetric  *float64 `parquet:"best_metric,optional"`
	TestScore   *float64 `parquet:"test_score,optional"` // grader on hidden labels
	Improved    bool     `parquet:"improved"`
	TotalReward float64  `parquet:"total_reward"`
	EndReason   string   `parquet:"end_reason"` // final_answer, max_steps, time_limit, error
	WallS       float64  `parquet:"wall_s"`
	Tokens      int64    `parquet:"tokens"`
	CostUSD     float64  `parquet:"cost_usd"`
	Shard       int32    `parquet:"shard"`
}

// RewardTerm is one named term of a step's reward.
type RewardTerm struct {
	Name  string  `parquet:"name"`
	Value float64 `parquet:"value"`
}

// Step is a row of the steps dataset: an expert state and what followed.
type Step struct {
	TaskID       string `parquet:"task_id"`
	TrajectoryID string `parquet:"trajectory_id"`
	StepIndex    int32  `parquet:"step_index"`
	// State is the full (MLAgentBench-style) rendering of the state before
	// the action; CompactState the small policy's rendering of the same
	// state (env/agents renders both).
	State        string `parquet:"state"`
	CompactState string `parquet:"compact_state"`
	// Plan is the episode's action plan (idea texts), shown in both prompts.
	Plan []string `parquet:"plan,list"`
	// ActionText is the agent's raw answer; ActionName and ActionInput
	// (JSON) its parse, empty when it did not parse.
	ActionText   string       `parquet:"action_text"`
	ActionName   string       `parquet:"action_name"`
	ActionInput  string       `parquet:"action_input"`
	Observation  string       `parquet:"observation"`
	Outcome      string       `parquet:"outcome"` // see env outcome classes
	MetricBefore *float64     `parquet:"metric_before,optional"`
	MetricAfter  *float64     `parquet:"metric_after,optional"`
	BestBefore   *float64     `parquet:"best_before,optional"`
	Markers      []string     `parquet:"markers,list"`
	Reward       float64      `parquet:"reward"`
	RewardTerms  []RewardTerm `parquet:"reward_terms,list"`
	// ExecS is the action's execution time (the duration used by the
	// duration-aware gradient); WallS the whole step including the agent.
	ExecS            float64 `parquet:"exec_s"`
	WallS            float64 `parquet:"wall_s"`
	PromptTokens     int64   `parquet:"prompt_tokens"`
	CompletionTokens int64   `parquet:"completion_tokens"`
	CostUSD          float64 `parquet:"cost_usd"`
	// SnapshotRef restores the environment state before the action;
	// SnapshotAfter the state after it.
	SnapshotRef   string `parquet:"snapshot_ref"`
	SnapshotAfter string `parquet:"snapshot_after"`
	Done          bool   `parquet:"done"`
}

// SFTExample is a row of the sft_examples dataset.
type SFTExample struct {
	ExampleID    string `parquet:"example_id"`
	TaskID       string `parquet:"task_id"`
	Split        string `parquet:"split"`
	TrajectoryID string `parquet:"trajectory_id"`
	StepIndex    int32  `parquet:"step_index"`
	// Prompt is the compact rendering (the small policy's input); FullPrompt
	// the full MLAgentBench-style one used by exports.
	Prompt         string  `parquet:"prompt"`
	FullPrompt     string  `parquet:"full_prompt"`
	Response       string  `parquet:"response"`
	PromptTokens   int32   `parquet:"prompt_tokens"`
	ResponseTokens int32   `parquet:"response_tokens"`
	Outcome        string  `parquet:"outcome"`
	Reward         float64 `parquet:"reward"`
	// Weight is the example's loss weight in SFT (nil: 1). An expert edit
	// and its plan variants share one unit of weight (since 1.1).
	Weight *float64 `parquet:"weight,optional"`
}

// RLState is a row of the rl_states dataset.
type RLState struct {
	StateID      string `parquet:"state_id"`
	TaskID       string `parquet:"task_id"`
	Split        string `parquet:"split"`
	TrajectoryID string `parquet:"trajectory_id"`
	StepIndex    int32  `parquet:"step_index"`
	Prompt       string `parquet:"prompt"`
	FullPrompt   string `parquet:"full_prompt"`
	SnapshotRef  string `parquet:"snapshot_ref"`
	// What the reward needs besides the snapshot.
	Metric     string   `parquet:"metric"`
	Direction  string   `parquet:"direction"`
	MInit      float64  `parquet:"m_init"`
	MBest      float64  `parquet:"m_best"`
	MetricPrev *float64 `parquet:"metric_prev,optional"`
	// The expert's own action from this state, for reference.
	ExpertAction string  `parquet:"expert_action"`
	ExpertReward float64 `parquet:"expert_reward"`
	ExpertExecS  float64 `parquet:"expert_exec_s"`
}

// EvalResult is a row of the eval_results dataset.
type EvalResult struct {
	RunID      string  `parquet:"run_id"`
	Method     string  `parquet:"method"` // initial, random, expert, sft, sft+ppo, llm
	TaskID     string  `parquet:"task_id"`
	Split      string  `parquet:"split"`
	Metric     string  `parquet:"metric"`
	Direction  string  `parquet:"direction"`
	Trajectory int32   `parquet:"trajectory"`
	Seed       int64   `parquet:"seed"`
	MInit      float64 `parquet:"m_init"`
	// FinalScore is the score of the final workspace's submission (m_init
	// when the agent never produced a better valid run).
	FinalScore float64  `parquet:"final_score"`
	BestScore  *float64 `parquet:"best_score,optional"`
	Steps      int32    `parquet:"steps"`
	WallS      float64  `parquet:"wall_s"`
	CostUSD    float64  `parquet:"cost_usd"`
	Actions    []string `parquet:"actions,list"`
	Outcomes   []string `parquet:"outcomes,list"`
	// Answers are the agent's raw answers, one per step, and Feedback the
	// first line of what the environment said to each (both cut to
	// MaxTranscriptChars): what the agent did, for the report's
	// transcripts. Since 1.1; empty in 1.0 datasets.
	Answers  []string `parquet:"answers,list"`
	Feedback []string `parquet:"feedback,list"`
	// Since 1.2 (absent before, and for a method with no agent): the wall
	// seconds the trajectory spent generating (the agent's answers: a
	// policy's sampling, an LLM's calls), waiting for the other
	// trajectories of its lockstep batch to ask (a policy's episodes are
	// answered together), and executing (the environment's steps: script
	// runs, execution-cache replays included).
	GenerateS *float64 `parquet:"generate_s,optional"`
	WaitS     *float64 `parquet:"wait_s,optional"`
	ExecuteS  *float64 `parquet:"execute_s,optional"`
	// Since 1.3: ScoredOn says which hidden answers MInit, FinalScore and
	// BestScore are scores on: ScoredPrivate (the private part, whose
	// scores the agent never saw) or ScoredAll (a task without parts;
	// empty in rows before 1.3, which were all ScoredAll). The public
	// part's scores beside them (nil without parts) are what the agent
	// was told: public minus private is how much its choices fitted the
	// feedback it read. MBest is the task's m_best on ScoredOn's answers.
	ScoredOn         string   `parquet:"scored_on,optional"`
	MBest            *float64 `parquet:"m_best,optional"`
	MInitPublic      *float64 `parquet:"m_init_public,optional"`
	MBestPublic      *float64 `parquet:"m_best_public,optional"`
	FinalScorePublic *float64 `parquet:"final_score_public,optional"`
	BestScorePublic  *float64 `parquet:"best_score_public,optional"`
}

// MaxTranscriptChars bounds each of an eval_results row's answers and
// feedback lines.
const MaxTranscriptChars = 1200

// ExperimentRow is a row of the experiments dataset (`mlerl experiment`):
// one evaluation trajectory of one arm of the grid, trained and evaluated
// with one seed, with what the arm's cell cost.
type ExperimentRow struct {
	Grid       string   `parquet:"grid"`
	Arm        string   `parquet:"arm"`
	Seed       int64    `parquet:"seed"`
	Method     string   `parquet:"method"` // the evaluated method: initial, random, expert, sft, sft+ppo
	TaskID     string   `parquet:"task_id"`
	Split      string   `parquet:"split"`
	Metric     string   `parquet:"metric"`
	Direction  string   `parquet:"direction"`
	Trajectory int32    `parquet:"trajectory"`
	MInit      float64  `parquet:"m_init"`
	FinalScore float64  `parquet:"final_score"`
	BestScore  *float64 `parquet:"best_score,optional"`
	// DeltaR is beta * (final - m_init) / m_init (beta -1 for lower-is-better).
	DeltaR float64 `parquet:"delta_r"`
	Steps  int32   `parquet:"steps"`
	// ValidActions counts steps whose action the environment accepted
	// (env.Accepted: not a format error, an invalid action or an invalid edit).
	ValidActions int32 `parquet:"valid_actions"`
	// The cell's costs (the same on every row of the cell): wall and CPU
	// seconds of its training and of its evaluation, children included.
	TrainWallS float64 `parquet:"train_wall_s"`
	TrainCPUS  float64 `parquet:"train_cpu_s"`
	EvalWallS  float64 `parquet:"eval_wall_s"`
	EvalCPUS   float64 `parquet:"eval_cpu_s"`
	// RewardCurve is the PPO arm's mean reward per update (empty for other arms).
	RewardCurve []float64 `parquet:"reward_curve,list"`
	// ValidCurve is the PPO arm's valid-action rate per update.
	ValidCurve []float64 `parquet:"valid_curve,list"`
	// Since 1.1 (empty in 1.0 datasets), read from the PPO cell's
	// metrics.jsonl and the same on every row of the cell: its learning
	// curve, one entry per evaluation point (train ppo --curve.every);
	// the outcome and action shares of each update's samples; and what
	// every sample its updates trained on did, summed for the report's
	// phenomenon checks.
	Curve   []CurvePoint   `parquet:"curve,list"`
	Updates []UpdateShares `parquet:"updates,list"`
	// SampleClasses counts the cell's samples per environment outcome
	// class (success, format_error, script_error...).
	SampleClasses []Count `parquet:"sample_classes,list"`
	// FailedMarkers counts, over the samples whose script ran and failed
	// (script_error, killed, output_limit, invalid_submission, timeout,
	// oom), the last instrumentation marker each run reached ("" when it
	// reached none).
	FailedMarkers []Count `parquet:"failed_markers,list"`
	// DurationReward holds the sums from which the correlation of a
	// sample's duration and its reward is computed, over the samples whose
	// step ran a script ("executed") and over all of them ("all").
	DurationReward []Moments `parquet:"duration_reward,list"`
	// StalenessByDuration is the staleness of the cell's slower and faster
	// samples (split at the cell's median duration).
	StalenessByDuration []DurationHalf `parquet:"staleness_by_duration,list"`
	// Since 1.2 (empty before): per update, how the samples it trained on
	// spread over the cell's duration quarters, and their staleness (the
	// asynchronous collector's frequency bias, issue 22).
	UpdateDurations []UpdateDurations `parquet:"update_durations,list"`
	// Since 1.3 (empty before): where a PPO cell's training time went,
	// phase by phase, summed over its updates from train ppo's metrics
	// (generate, execute, learn, and curve for its learning-curve
	// evaluations); a phase the run did not record is absent. Since 1.6,
	// two parts of execute follow where train ppo recorded them:
	// execute_busy (the workers' step time, summed over the workers) and
	// execute_scripts (the scripts' own run time within it). They are not
	// phases of their own: do not add them to the others.
	PPOTime []PhaseTime `parquet:"ppo_time,list"`
	// Since 1.4 (absent before): the share of the task's headroom the
	// final score closed, (final - m_init) / (m_best - m_init) clipped to
	// [-1, 1]; absent when the task has no headroom or the tasks dataset
	// gave no m_best.
	Headroom *float64 `parquet:"headroom,optional"`
	// Since 1.5 (empty before): where the cell's evaluation time went,
	// summed over its trajectories from eval_results 1.2 (generate: the
	// agent's answers; wait: for the lockstep batch; execute: the
	// environment's steps). Trajectories run
	// in parallel (evaluate --workers), so these are trajectory-seconds:
	// their sum can exceed the evaluation's wall time.
	EvalTime []PhaseTime `parquet:"eval_time,list"`
	// Since 1.7 (absent before): as eval_results 1.3, which part of the
	// hidden answers MInit, FinalScore, BestScore, DeltaR and Headroom are
	// on (ScoredPrivate, or ScoredAll for a task without parts), and the
	// same statistics on the public part, which the agent was told.
	ScoredOn         string   `parquet:"scored_on,optional"`
	MInitPublic      *float64 `parquet:"m_init_public,optional"`
	FinalScorePublic *float64 `parquet:"final_score_public,optional"`
	DeltaRPublic     *float64 `parquet:"delta_r_public,optional"`
	HeadroomPublic   *float64 `parquet:"headroom_public,optional"`
}

// CurvePoint is one point of a PPO run's learning curve: the policy after
// Update updates, evaluated on the held-in and held-out tasks.
type CurvePoint struct {
	Update int32 `parquet:"update"`
	// WallS and CPUS are the seconds spent on updates so far (the
	// learning-curve evaluations excluded).
	WallS float64 `parquet:"wall_s"`
	CPUS  float64 `parquet:"cpu_s"`
	// HeldInDeltaR and HeldOutDeltaR are the mean delta_r over the split's
	// tasks; NaN when the split was not evaluated.
	HeldInDeltaR  float64 `parquet:"held_in_delta_r"`
	HeldOutDeltaR float64 `parquet:"held_out_delta_r"`
}

// UpdateShares is one PPO update's shares of its samples: outcomes
// (success; error: a script failure; corner: timeout or out-of-memory,
// the corner cases the reward spares; refused: a format error, a refused
// action or an invalid edit) and actions (undo, final answer).
type UpdateShares struct {
	Update      int32   `parquet:"update"`
	WallS       float64 `parquet:"wall_s"` // update seconds so far
	CPUS        float64 `parquet:"cpu_s"`
	Success     float64 `parquet:"success"`
	Error       float64 `parquet:"error"`
	Corner      float64 `parquet:"corner"`
	Refused     float64 `parquet:"refused"`
	Undo        float64 `parquet:"undo"`
	FinalAnswer float64 `parquet:"final_answer"`
}

// Count is a name and how often it occurred.
type Count struct {
	Name string `parquet:"name"`
	N    int64  `parquet:"n"`
}

// Moments are the sums of a sample of pairs (x, y) that a Pearson
// correlation needs, so that cells can be pooled exactly.
type Moments struct {
	Subset string  `parquet:"subset"`
	N      int64   `parquet:"n"`
	SumX   float64 `parquet:"sum_x"`
	SumY   float64 `parquet:"sum_y"`
	SumXX  float64 `parquet:"sum_xx"`
	SumYY  float64 `parquet:"sum_yy"`
	SumXY  float64 `parquet:"sum_xy"`
}

// PhaseTime is the wall seconds a cell spent in one phase: of a PPO
// cell's updates (ExperimentRow.PPOTime), or of its evaluation's
// trajectories (ExperimentRow.EvalTime).
type PhaseTime struct {
	Phase string  `parquet:"phase"`
	WallS float64 `parquet:"wall_s"`
}

// UpdateDurations is one PPO update's samples by duration: the quarters
// rank the cell's recorded samples (trained and dropped, every update) by
// duration, fastest first, so that each holds a quarter of what the
// actors produced; Q1..Q4 are the shares of the update's trained samples
// in each. A collector that trains on whatever finishes first leans to
// Q1 early and loses Q4 to staleness; the synchronous one trains on all
// of them.
type UpdateDurations struct {
	Update  int32   `parquet:"update"`
	Trained int32   `parquet:"trained"` // samples the update trained on
	Dropped int32   `parquet:"dropped"` // samples it dropped (stale, or a group without signal)
	Q1      float64 `parquet:"q1"`
	Q2      float64 `parquet:"q2"`
	Q3      float64 `parquet:"q3"`
	Q4      float64 `parquet:"q4"`
	// Staleness is the trained samples' mean staleness (policy versions
	// between generation and use).
	Staleness float64 `parquet:"staleness"`
}

// DurationHalf is the slow (duration above the cell's median) or fast
// half of a PPO cell's samples: how many, and their summed duration and
// staleness (policy versions between generation and use).
type DurationHalf struct {
	Half         string  `parquet:"half"`
	N            int64   `parquet:"n"`
	DurationSum  float64 `parquet:"duration_sum"`
	StalenessSum float64 `parquet:"staleness_sum"`
}
