// Package env is the agent environment: one ML task's workspace that an
// agent changes one MLAgentBench-style action at a time, with sandboxed
// execution, grading on hidden labels, rewards and exact snapshots.
// Rollouts, step-wise RL and evaluation all step it.
//
// Start with [New] (an episode on a task [Spec], usually [SpecFromTask] of
// a tasks row) and [Env.Step], which takes the agent's raw response and
// returns a [StepResult]: the parsed [Action] (or a [FormatError]), the
// observation, the [Outcome] class, the scores before and after, the
// partial-credit markers, the [Reward] terms and the durations.
// [Env.Snapshot] and [Restore] save and bring back the whole state exactly
// (step-wise RL samples expert states this way). See the package Example.
//
// The pieces, one file each:
//
//   - action.go: [Parse] (strict; every failure a *[FormatError] of one
//     [FormatErrorKind]) and [Render] (canonical text, used by experts).
//   - env.go: [Config], [Spec], [Env], [Env.Step] and the [Outcome] classes.
//   - files.go: the file actions and the workspace boundary (absolute
//     paths, "..", symlinks are refused as invalid actions). Everything
//     the host reads from a workspace (files for actions, the submission
//     the grader scores, snapshots, the script a prompt shows) goes
//     through internal/safefile: no link is followed, only regular files
//     are read, with a size cap, and a FIFO or device is never opened.
//   - editor.go: the [Editor] behind Edit Script (AI): [OfflineEditor]
//     (the idea catalog's concrete edits) and [LLMEditor] (chat completions).
//   - diff.go: [UnifiedDiff], the observation of an edit.
//   - instrument.go: the partial-credit markers ([StaticInstrumenter]).
//   - grade.go, grade_warm.go: [Grade], the task's private grader on hidden
//     labels (a submission.csv that is a link, a hard link, a FIFO, a
//     device or over [MaxSubmissionBytes] is an invalid submission), run by a warm worker that imports numpy/pandas/scikit-learn
//     once (about 0.1 s a grade instead of 1-3 s).
//   - reward.go: [ComputeReward] and [RewardConfig], one switch per term.
//   - snapshot.go: [Env.Snapshot], [Restore].
//
// # Episodes
//
// An episode ends after a Final Answer, after Config.MaxSteps steps (15;
// a format error counts as a step) or once Config.MaxTime (30 min) has
// elapsed (the time inside Step plus what the caller adds with
// [Env.AddTime]); Step then returns [ErrDone]. An error from Step means
// the environment itself failed (store, grader, runner, cancelled
// context); everything the agent can do wrong is an outcome.
//
// Execute Script removes any old submission.csv, instruments the script
// for a fresh nonce (Config.Instrumenter; a script that could print
// markers it did not reach runs without them: instrument.go), runs it
// through Config.Runner with the task's time limit (cut to the episode's
// remaining time) and the workspace quota (quota.go), strips the markers
// from its output, and grades submission.csv with the task's
// private grader, whose files exist only in a temporary folder outside the
// workspace while it runs (verdicts are cached per process by private
// tree and submission hash: graders are pure functions of their files).
// Only the grader's score moves the current score
// (m_prev, starting at m_init) and the best score, and only it enters the
// reward; the VAL_METRIC line the script prints is reported
// (StepResult.ValMetric) but never rewarded.
//
// # Rewards
//
// [ComputeReward] documents every case. In short (defaults): -1 for a
// format error, refused action or invalid edit; 0 for other non-running
// actions and for timeouts, out-of-memory runs and editor failures; -1 plus
// 0.1 per marker reached for a failed run; and for a graded run after an
// edit, (m_new - m_base) / (m_best - m_init), sign-flipped for
// lower-is-better metrics and clipped to [-1, 1], m_base the last edited
// run's score (m_init before any; raised, never lowered, by a re-run).
// Re-running an unchanged workspace earns 0, so a lucky re-run of a
// random script is not rewarded, nor can an unlucky one lower the next
// edit's baseline; a timeout that slept out its limit is a failed run.
// With Config.ExecuteAfterEdit an edit runs its script in the same step
// and so carries its own improvement (for step-wise RL).
package env
