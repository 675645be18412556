// Package experiment is `mlerl experiment` (Make target `science`): a
// declared grid of arms x seeds, each arm trained and evaluated with each
// seed by the stages themselves, one process each, and a report of the
// held-out and held-in delta_r, avg@k and best@k, valid-action rates,
// PPO reward curves and the wall and CPU time of every arm, with 95%
// intervals over seeds and tasks, and a claims table saying which of the
// papers' claims reproduce at this scale.
//
// Start with [Run] (experiment.go): it plans the cells (cell.go), runs
// each one (its training, then `mlerl evaluate` into a dataset of its
// own), keeps its rows as a part file of the pending experiments version
// (so a rerun resumes), then summarises and reports (report.go,
// plots.go). [DefaultArms] is the grid: the initial script, random and
// scripted-expert baselines, SFT, SFT + step-wise PPO, and its ablations
// (duration weighting off, partial credit off, episode-wise PPO, no
// format term). [Budgets] size it: small (minutes) or full (hours).
//
// The experiment runs the stages through the mlerl binary rather than
// importing them: stages talk only through datasets, and a process per
// stage is what measures a cell's CPU time, its sandboxed scripts
// included.
package experiment
