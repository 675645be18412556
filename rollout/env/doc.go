// Package env is the agent environment: one ML task's workspace that an
// agent changes one MLAgentBench-style action at a time, with sandboxed
// execution, grading on hidden labels, rewards and exact snapshots.
// Rollouts, step-wise RL and evaluation all step it.
//
// Start with [New] (an episode on a task [Spec], usually [SpecFromTask] of a
// tasks row) and [Env.Step], which takes the agent's raw response and
// returns a [StepResult]: the parsed [Action] (or a [FormatError]), the
// observation, the [Outcome] class, the scores before and after, the
// partial-credit markers, the [Reward] terms and the durations.
// [Env.Snapshot] and [Restore] save and bring back the whole state exactly
// (step-wise RL samples expert states this way).
//
// The pieces, one file each:
//
//   - action.go: [Parse] (strict; every failure a *[FormatError] of one
//     [FormatErrorKind]) and [Render] (canonical text, used by experts).
//   - editor.go: the [Editor] behind Edit Script (AI): [OfflineEditor]
//     (the idea catalog's concrete edits) and [LLMEditor] (chat completions).
//   - diff.go: [UnifiedDiff], the observation of an edit.
//   - files.go: the file actions and the workspace boundary (absolute
//     paths, "..", symlinks are refused as invalid actions).
//   - grade.go: [Grade], the task's private grader.
//   - reward.go: [ComputeReward] and [RewardConfig], one switch per term.
//   - snapshot.go: [Env.Snapshot], [Restore].
//
// An episode ends after a Final Answer, after Config.MaxSteps steps (15) or
// once Config.MaxTime (30 min) has elapsed; Step then returns [ErrDone].
// Execute Script removes any old submission.csv, instruments the script
// with a fresh nonce (Config.Instrumenter), runs it through
// Config.Runner with the task's time limit, strips the markers from its
// output, and grades submission.csv; only the grader's score on hidden
// labels moves the current and best scores and the reward. The
// VAL_METRIC line the script prints is reported (StepResult.ValMetric) but
// never rewarded.
package env
