// Package evaluate is the evaluation stage: every method acts in the
// environment on the held-out tasks (and, reported separately, the
// held-in ones) with the same budget, and the stage writes the
// `eval_results` dataset and a report (Markdown and PNG plots).
//
// Start with [Run], which reads top to bottom: inputs, methods, the work
// list, the episodes, the dataset, the summary, the report. What it shares
// with the rollout (task selection, plans and seeds, the run key, the
// script runner, one episode in a fresh environment) is env/episode's.
// [Summarize] computes the statistics (stats.go), [WriteReport] the report
// (report.go, with transcripts.md: each method's first trajectory of each
// task step by step, from the answers eval_results keeps) and the plots
// are drawn in plots.go.
//
// # Methods
//
//   - initial: the task's initial script, untouched. Its score is m_init,
//     so its delta_r is 0 by construction; one row per task, no episode.
//   - random: [agents.Random], a valid action drawn uniformly each step.
//   - expert: [agents.Scripted], the built-in expert of the rollouts.
//   - llm: [agents.LLM] on the configured endpoint (only with llm.base_url).
//   - sft, sft+ppo: the trained policy ([policy.LoadAgent]) from the latest
//     checkpoint of the SFT and PPO folders (`mlerl train sft|ppo`):
//     mlerl's own model or a Hugging Face policy, whichever the checkpoint
//     holds (its policy.json names the base).
//   - policy: a pretrained model the policy key names (a Hugging Face
//     checkpoint folder hf:DIR, with a PEFT adapter when adapter names
//     one) prompted as it is ([policy.OpenAgent]), its answers held to the
//     action grammar like the trained policies': the base model before any
//     training (the prompted baseline), or one fine-tuned elsewhere.
//
// Every method gets the same N trajectories per task (per_task, 8 by
// default; policy_per_task may give the trained policies only the first
// few, to save time, and the report says so), each with the same
// environment limits (env.max_steps, 15, and env.max_time) as the
// rollouts. Trajectory i of a task has the same seed
// and the same initial plan for every method (a paired comparison). Plans
// are sampled as in the rollouts ([episode.Inputs.Plan]) from the task's
// kept ideas: ideas are generated from the task description alone, without
// its labels, so giving them to an agent on a held-out task leaks nothing
// that an agent could not have written itself.
//
// Prompts are rendered as the rollout rendered them: with the token
// budgets and counter its steps manifest records (the steps setting names
// it; [episode.PromptsOf]), so that the policies act on prompts like those
// they were trained on.
//
// A trained policy's N episodes of a task run in lockstep (episode.Lockstep):
// each step, the policy answers every running episode in one batched
// generation. Its answers then depend on the batch as well as on the
// seeds, but the batches are the same from run to run, so an evaluation
// is reproducible.
//
// # Scores
//
// A trajectory's final score is the grader's score (hidden labels) of the
// submission standing at the end of the episode: the last valid graded
// run's score (the environment's m_prev), or m_init when the agent never
// produced a valid run. This is the "final score" of ML-Agent's avg@8; the
// best score reached during the episode is recorded too (best_score), but
// the statistics use final scores only.
//
// For a task and method with final scores s_1..s_N:
//
//	avg@N   = mean(s_i)
//	best@N  = the best s_i (max, or min for lower-is-better metrics)
//	delta_r = beta * (avg@N - m_init) / m_init, beta = -1 when lower is better
//
// The 95% confidence interval of delta_r is the Student t interval of the
// mean of the N final scores (t quantile with N-1 degrees of freedom),
// scaled by |beta / m_init|. The headline per method is the mean of the
// per-task delta_r over the tasks of a split; its interval combines the
// tasks' standard errors (sqrt(sum se_i^2) / T, t with sum(N_i - 1)
// degrees of freedom), which treats tasks as fixed, not sampled.
package evaluate
