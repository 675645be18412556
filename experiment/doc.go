// Package experiment is `mlerl experiment` (Make target `science`): a
// declared grid of arms x seeds, each arm trained and evaluated with each
// seed by the stages themselves, one process each, and a report of the
// held-out and held-in delta_r, avg@k and best@k, valid-action rates,
// PPO reward and learning curves, phenomenon checks, a reward-hacking
// watch and the wall and CPU time of every arm, with 95% intervals over
// seeds and tasks, and a claims table saying which of the papers' claims
// reproduce at this scale, and which cannot be tested here.
//
// Start with [Run] (experiment.go): it plans the cells (cell.go), runs
// each one (its training, then `mlerl evaluate` into a dataset of its
// own; a PPO cell also keeps what its metrics.jsonl says, ppometrics.go),
// keeps its rows as a part file of the pending experiments version (so a
// rerun resumes), then summarises and reports (report.go, with
// phenomena.go and curves.go; plots.go). [Presets] are the grids: main
// ([DefaultArms]: the initial script, random and scripted-expert
// baselines, SFT, SFT + step-wise PPO and its ablations), rl, ablations
// and taskcount. [Budgets] size them: small (minutes) or full (hours).
//
// The experiment runs the stages through the mlerl binary rather than
// importing them: stages talk only through datasets, and a process per
// stage is what measures a cell's CPU time, its sandboxed scripts
// included.
package experiment
