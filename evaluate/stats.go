package evaluate

import (
	"encoding/json"
	"math"
	"slices"
	"sort"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/schemas"
)

// Cell is one method on one task: the statistics of its final scores.
type Cell struct {
	Method    string  `json:"method"`
	TaskID    string  `json:"task_id"`
	Split     string  `json:"split"`
	Metric    string  `json:"metric"`
	Direction string  `json:"direction"`
	MInit     float64 `json:"m_init"`
	N         int     `json:"n"`
	Avg       float64 `json:"avg"`  // avg@N of the final scores
	Best      float64 `json:"best"` // best@N of the final scores
	// SE is the standard error of Avg (0 when N is 1).
	SE float64 `json:"se"`
	// Delta is delta_r; DeltaCI the half-width of its 95% interval (NaN
	// when m_init is 0: the relative gain is undefined).
	Delta   float64 `json:"delta_r"`
	DeltaCI float64 `json:"delta_r_ci95"`
	// Room is the mean share of the headroom the final scores closed,
	// (final - m_init) / (m_best - m_init) clipped to [-1, 1] per
	// trajectory (env.HeadroomShare), and RoomCI the half-width of its 95%
	// interval: bounded per task, where delta_r is not (a task with a
	// small m_init can decide a mean of delta_r). NaN without the task's
	// m_best.
	Room   float64 `json:"headroom"`
	RoomCI float64 `json:"headroom_ci95"`
	roomSE float64
	// Improved is the share of trajectories whose final score beats m_init.
	Improved  float64 `json:"improved"`
	MeanSteps float64 `json:"mean_steps"`
	MeanWallS float64 `json:"mean_wall_s"`
	MeanCost  float64 `json:"mean_cost_usd"`
	// Valid is the share of steps whose action the environment accepted
	// (parsed, not refused, not an invalid edit: [env.Accepted]); 0 with no steps (AllSteps
	// 0: undefined, as for the initial script, which takes none).
	Valid float64 `json:"valid_actions"`
	// AllSteps and ValidSteps are Valid's counts.
	AllSteps   int `json:"steps_total"`
	ValidSteps int `json:"steps_valid"`
}

// Headline is one method on one split: the mean of its tasks' delta_r.
type Headline struct {
	Method       string  `json:"method"`
	Split        string  `json:"split"`
	Tasks        int     `json:"tasks"`
	Trajectories int     `json:"trajectories"`
	Delta        float64 `json:"delta_r"`
	DeltaCI      float64 `json:"delta_r_ci95"`
	// Room is the mean over RoomTasks tasks of Cell.Room, with the same
	// kind of interval as delta_r's.
	Room      float64 `json:"headroom"`
	RoomCI    float64 `json:"headroom_ci95"`
	RoomTasks int     `json:"headroom_tasks"`
	Improved  float64 `json:"improved"`
	MeanSteps float64 `json:"mean_steps"`
	MeanWallS float64 `json:"mean_wall_s"`
	MeanCost  float64 `json:"mean_cost_usd"`
	Valid     float64 `json:"valid_actions"` // share of steps accepted, over every step of the split (0 when AllSteps is 0)
	AllSteps  int     `json:"steps_total"`
}

// MarshalJSON writes a value that was not measured (NaN: no task with an
// m_init for delta_r, none with an m_best for the headroom share) as null,
// which encoding/json cannot write as a number (the evaluation manifest
// stores the headlines).
func (h Headline) MarshalJSON() ([]byte, error) {
	type plain Headline
	measured := func(x float64) *float64 {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
		return &x
	}
	return json.Marshal(struct {
		plain
		Delta   *float64 `json:"delta_r"`
		DeltaCI *float64 `json:"delta_r_ci95"`
		Room    *float64 `json:"headroom"`
		RoomCI  *float64 `json:"headroom_ci95"`
	}{plain(h), measured(h.Delta), measured(h.DeltaCI), measured(h.Room), measured(h.RoomCI)})
}

// Summary is what the report shows.
type Summary struct {
	Cells     []Cell     `json:"cells"`     // by split, task, method
	Headlines []Headline `json:"headlines"` // by split, method
	// Actions and Outcomes count steps per method.
	Actions  map[string]map[string]int `json:"actions"`
	Outcomes map[string]map[string]int `json:"outcomes"`
	Methods  []string                  `json:"methods"` // in report order
	// Behaviours say what each method did, by split: run 8's collapse
	// (edits repeated, scripts never run, no Final Answer) reads here.
	Behaviours []Behaviour `json:"behaviours"` // by split, method
	// PPOIsSFT, when the sft+ppo rows evaluated the SFT weights (the PPO
	// run selected update 0), is the selection's reason; the verdicts
	// then say that SFT+PPO is SFT.
	PPOIsSFT string `json:"ppo_is_sft,omitempty"`
	// FeedbackFits are the public minus private differences, by split
	// and method (empty when no row has both parts' scores).
	FeedbackFits []FeedbackFit `json:"feedback_fits,omitempty"`
	// ScoredOn is which hidden answers every score above is on:
	// schemas.ScoredPrivate, schemas.ScoredAll, or "mixed".
	ScoredOn string `json:"scored_on"`
}

// Behaviour is what one method's agents did on one split's tasks: how
// often they edited, how many of those edits changed nothing, how many of
// their trajectories ran the script and gave a Final Answer, and how many
// made a better script and kept it.
type Behaviour struct {
	Method       string `json:"method"`
	Split        string `json:"split"`
	Trajectories int    `json:"trajectories"`
	Steps        int    `json:"steps"`
	Edits        int    `json:"edits"`           // Edit Script (AI) and Edit Script Segment steps
	Unchanged    int    `json:"edits_unchanged"` // edits the environment reported left the file unchanged
	Executes     int    `json:"executes"`        // Execute Script steps
	RanScript    int    `json:"trajectories_ran_script"`
	FinalAnswer  int    `json:"trajectories_final_answer"`
	// Unrun counts the trajectories that ended with a change to the script
	// no run followed: more edits that changed it than undos since the
	// last Execute Script (or undos of edits that were run). Their last
	// steps were wasted: the score is the last run's submission.
	Unrun int `json:"trajectories_unrun_change"`
	// Found counts the trajectories in which a graded run beat the initial
	// script (the run the public part ranked best, BestScore, better than
	// m_init on the reported answers), and Kept those of them whose final
	// submission still did: Found - Kept is how often an agent made a
	// better script and lost it again (undone, edited over, or followed
	// by a worse last run). Run 17's SmolLM2 SFT policy lost 35 of 41.
	Found int `json:"trajectories_found_better"`
	Kept  int `json:"trajectories_kept_better"`
}

// behaviours counts Behaviour per (split, method) in Summary order.
func behaviours(rows []schemas.EvalResult, methods []string) []Behaviour {
	type key struct{ split, method string }
	by := map[key]*Behaviour{}
	for _, r := range rows {
		k := key{r.Split, r.Method}
		b := by[k]
		if b == nil {
			b = &Behaviour{Method: r.Method, Split: r.Split}
			by[k] = b
		}
		b.Trajectories++
		b.Steps += len(r.Actions)
		ran, final, pending := false, false, 0 // pending: changes since the last run, edits +1, undos -1
		for i, a := range r.Actions {
			// A refused or failed edit or undo changed nothing.
			done := i >= len(r.Outcomes) || r.Outcomes[i] == string(env.OutcomeSuccess)
			switch a {
			case env.EditScriptAI, env.EditScriptSegment:
				b.Edits++
				if i < len(r.Feedback) && strings.HasPrefix(r.Feedback[i], env.UnchangedEditPrefix) {
					b.Unchanged++
				} else if done {
					pending++
				}
			case env.UndoEditScript:
				if done {
					pending--
				}
			case env.ExecuteScript:
				b.Executes++
				ran, pending = true, 0
			case env.FinalAnswer:
				final = true
			}
		}
		if pending != 0 {
			b.Unrun++
		}
		if r.BestScore != nil && better(r.Direction, *r.BestScore, r.MInit) {
			b.Found++
			if better(r.Direction, r.FinalScore, r.MInit) {
				b.Kept++
			}
		}
		if ran {
			b.RanScript++
		}
		if final {
			b.FinalAnswer++
		}
	}
	var out []Behaviour
	for _, b := range by {
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Split != out[j].Split {
			return splitOrder(out[i].Split) < splitOrder(out[j].Split)
		}
		return slices.Index(methods, out[i].Method) < slices.Index(methods, out[j].Method)
	})
	return out
}

// Summarize computes the cells and headlines of a set of eval_results
// rows (see the package doc for the formulas).
func Summarize(rows []schemas.EvalResult) Summary { return SummarizeWith(rows, nil) }

// SummarizeWith is Summarize with each task's m_best (by task id), from
// which the cells and headlines also report the share of the headroom
// closed.
func SummarizeWith(rows []schemas.EvalResult, mBest map[string]float64) Summary {
	type key struct{ split, task, method string }
	groups := map[key][]schemas.EvalResult{}
	sum := Summary{Actions: map[string]map[string]int{}, Outcomes: map[string]map[string]int{}}
	for _, r := range rows {
		k := key{r.Split, r.TaskID, r.Method}
		groups[k] = append(groups[k], r)
		if !slices.Contains(sum.Methods, r.Method) {
			sum.Methods = append(sum.Methods, r.Method)
		}
		if sum.Actions[r.Method] == nil {
			sum.Actions[r.Method], sum.Outcomes[r.Method] = map[string]int{}, map[string]int{}
		}
		for _, a := range r.Actions {
			sum.Actions[r.Method][a]++
		}
		for _, o := range r.Outcomes {
			sum.Outcomes[r.Method][o]++
		}
	}
	sortMethods(sum.Methods)
	for k, g := range groups {
		c := cell(k.method, g)
		c.Room, c.RoomCI = math.NaN(), math.NaN()
		best, ok := mBest[k.task]
		if g[0].MBest != nil { // the m_best of the part the rows are scored on (eval_results 1.3)
			best, ok = *g[0].MBest, true
		}
		if ok {
			var shares []float64
			for _, r := range g {
				if v, ok := env.HeadroomShare(r.MInit, best, r.FinalScore); ok {
					shares = append(shares, v)
				}
			}
			if len(shares) == len(g) {
				c.Room, c.roomSE = meanSE(shares)
				c.RoomCI = c.roomSE * tQuantile975(len(g)-1)
			}
		}
		sum.Cells = append(sum.Cells, c)
	}
	order := func(m string) int { return slices.Index(sum.Methods, m) }
	sort.Slice(sum.Cells, func(i, j int) bool {
		a, b := sum.Cells[i], sum.Cells[j]
		if a.Split != b.Split {
			return splitOrder(a.Split) < splitOrder(b.Split)
		}
		if a.TaskID != b.TaskID {
			return a.TaskID < b.TaskID
		}
		return order(a.Method) < order(b.Method)
	})

	// Headlines: mean delta_r over a split's tasks, per method.
	type hk struct{ split, method string }
	var hkeys []hk
	byH := map[hk][]Cell{}
	for _, c := range sum.Cells {
		k := hk{c.Split, c.Method}
		if byH[k] == nil {
			hkeys = append(hkeys, k)
		}
		byH[k] = append(byH[k], c)
	}
	sort.SliceStable(hkeys, func(i, j int) bool {
		if hkeys[i].split != hkeys[j].split {
			return splitOrder(hkeys[i].split) < splitOrder(hkeys[j].split)
		}
		return order(hkeys[i].method) < order(hkeys[j].method)
	})
	for _, k := range hkeys {
		sum.Headlines = append(sum.Headlines, headline(k.split, k.method, byH[k]))
	}
	sum.Behaviours = behaviours(rows, sum.Methods)
	sum.FeedbackFits = feedbackFits(rows, sum.Methods)
	sum.ScoredOn = scoredOn(rows)
	return sum
}

// FeedbackFit is how much better one method's final scores are on the
// public part of the hidden answers (whose scores the agent was told) than
// on the private part (what is reported), on one split: per task, the
// mean over its trajectories of public minus private, as shares of each
// part's headroom and as delta_r on each part (each part against the
// initial script's score on it); then the mean over the tasks with a 95%
// Student t interval over them. Above 0: the agent's choices fitted the
// feedback it read better than the answers it never saw a score of. The
// initial script's difference is 0 by construction; a forecasting task's
// private part is the later half of its horizon, which every method
// forecasts worse, and each part is compared with its own m_init.
type FeedbackFit struct {
	Method  string  `json:"method"`
	Split   string  `json:"split"`
	Tasks   int     `json:"tasks"`
	Room    float64 `json:"headroom_public_minus_private"`
	RoomCI  float64 `json:"headroom_public_minus_private_ci95"`
	Delta   float64 `json:"delta_r_public_minus_private"`
	DeltaCI float64 `json:"delta_r_public_minus_private_ci95"`
}

// MarshalJSON writes what was not measured (NaN) as null.
func (f FeedbackFit) MarshalJSON() ([]byte, error) {
	type plain FeedbackFit
	m := func(x float64) *float64 {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
		return &x
	}
	return json.Marshal(struct {
		plain
		Room    *float64 `json:"headroom_public_minus_private"`
		RoomCI  *float64 `json:"headroom_public_minus_private_ci95"`
		Delta   *float64 `json:"delta_r_public_minus_private"`
		DeltaCI *float64 `json:"delta_r_public_minus_private_ci95"`
	}{plain(f), m(f.Room), m(f.RoomCI), m(f.Delta), m(f.DeltaCI)})
}

// PartDiff is one trajectory's public minus private difference: of the
// headroom shares and of delta_r (ok false for a row without both parts'
// scores; a statistic that is undefined on a part, such as delta_r with
// an m_init of 0, is NaN).
func PartDiff(r schemas.EvalResult) (room, delta float64, ok bool) {
	if r.ScoredOn != schemas.ScoredPrivate || r.MInitPublic == nil || r.MBestPublic == nil || r.FinalScorePublic == nil || r.MBest == nil {
		return 0, 0, false
	}
	room, delta = math.NaN(), math.NaN()
	hp, okp := env.HeadroomShare(*r.MInitPublic, *r.MBestPublic, *r.FinalScorePublic)
	hq, okq := env.HeadroomShare(r.MInit, *r.MBest, r.FinalScore)
	if okp && okq {
		room = hp - hq
	}
	if *r.MInitPublic != 0 && r.MInit != 0 {
		b := beta(r.Direction)
		delta = b*(*r.FinalScorePublic-*r.MInitPublic) / *r.MInitPublic - b*(r.FinalScore-r.MInit)/r.MInit
	}
	return room, delta, true
}

// feedbackFits computes FeedbackFit per (split, method) in report order,
// from the rows scored on a private part.
func feedbackFits(rows []schemas.EvalResult, methods []string) []FeedbackFit {
	type key struct{ split, method string }
	type acc struct{ room, delta []float64 }
	tasks := map[key]map[string]*acc{}
	for _, r := range rows {
		room, delta, ok := PartDiff(r)
		if !ok {
			continue
		}
		k := key{r.Split, r.Method}
		if tasks[k] == nil {
			tasks[k] = map[string]*acc{}
		}
		a := tasks[k][r.TaskID]
		if a == nil {
			a = &acc{}
			tasks[k][r.TaskID] = a
		}
		a.room, a.delta = append(a.room, room), append(a.delta, delta)
	}
	var out []FeedbackFit
	for k, byTask := range tasks {
		f := FeedbackFit{Method: k.method, Split: k.split, Tasks: len(byTask)}
		var rooms, deltas []float64
		for _, a := range byTask {
			if m, _ := meanSE(a.room); !math.IsNaN(m) {
				rooms = append(rooms, m)
			}
			if m, _ := meanSE(a.delta); !math.IsNaN(m) {
				deltas = append(deltas, m)
			}
		}
		f.Room, f.RoomCI = meanCI(rooms)
		f.Delta, f.DeltaCI = meanCI(deltas)
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Split != out[j].Split {
			return splitOrder(out[i].Split) < splitOrder(out[j].Split)
		}
		return slices.Index(methods, out[i].Method) < slices.Index(methods, out[j].Method)
	})
	return out
}

// meanCI is the mean of xs and the half-width of its 95% Student t
// interval (NaN, NaN for no values).
func meanCI(xs []float64) (mean, half float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	m, se := meanSE(xs)
	return m, se * tQuantile975(len(xs)-1)
}

// scoredOn says which hidden answers the rows' scores are on: the private
// part (every row ScoredPrivate), all of them (none), or "mixed".
func scoredOn(rows []schemas.EvalResult) string {
	out := ""
	for _, r := range rows {
		s := r.ScoredOn
		if s == "" {
			s = schemas.ScoredAll
		}
		switch {
		case out == "":
			out = s
		case out != s:
			return "mixed"
		}
	}
	return out
}

func cell(method string, g []schemas.EvalResult) Cell {
	r0 := g[0]
	c := Cell{Method: method, TaskID: r0.TaskID, Split: r0.Split, Metric: r0.Metric, Direction: r0.Direction, MInit: r0.MInit, N: len(g)}
	scores := make([]float64, len(g))
	c.AllSteps, c.ValidSteps = validSteps(g)
	c.Valid = ratio(c.ValidSteps, c.AllSteps)
	for i, r := range g {
		scores[i] = r.FinalScore
		if better(r.Direction, r.FinalScore, r.MInit) {
			c.Improved++
		}
		c.MeanSteps += float64(r.Steps)
		c.MeanWallS += r.WallS
		c.MeanCost += r.CostUSD
	}
	n := float64(len(g))
	c.Improved /= n
	c.MeanSteps /= n
	c.MeanWallS /= n
	c.MeanCost /= n
	c.Avg, c.SE = meanSE(scores)
	c.Best = scores[0]
	for _, s := range scores[1:] {
		if better(c.Direction, s, c.Best) {
			c.Best = s
		}
	}
	c.Delta, c.DeltaCI = math.NaN(), math.NaN()
	if c.MInit != 0 {
		scale := beta(c.Direction) / c.MInit
		c.Delta = scale * (c.Avg - c.MInit)
		c.DeltaCI = math.Abs(scale) * c.SE * tQuantile975(len(g)-1)
	}
	return c
}

func headline(split, method string, cells []Cell) Headline {
	h := Headline{Method: method, Split: split}
	var se2, roomSE2 float64
	df, roomDF := 0, 0
	steps, valid := 0, 0
	for _, c := range cells {
		steps, valid = steps+c.AllSteps, valid+c.ValidSteps
		h.Trajectories += c.N
		w := float64(c.N)
		h.Improved += c.Improved * w
		h.MeanSteps += c.MeanSteps * w
		h.MeanWallS += c.MeanWallS * w
		h.MeanCost += c.MeanCost * w
		if !math.IsNaN(c.Room) {
			h.RoomTasks++
			h.Room += c.Room
			roomSE2 += c.roomSE * c.roomSE
			roomDF += c.N - 1
		}
		if math.IsNaN(c.Delta) {
			continue
		}
		h.Tasks++
		h.Delta += c.Delta
		s := math.Abs(beta(c.Direction)/c.MInit) * c.SE
		se2 += s * s
		df += c.N - 1
	}
	if n := float64(h.Trajectories); n > 0 {
		h.Improved /= n
		h.MeanSteps /= n
		h.MeanWallS /= n
		h.MeanCost /= n
	}
	h.Valid, h.AllSteps = ratio(valid, steps), steps
	if t := float64(h.RoomTasks); t > 0 {
		h.Room /= t
		h.RoomCI = tQuantile975(roomDF) * math.Sqrt(roomSE2) / t
	} else {
		h.Room, h.RoomCI = math.NaN(), math.NaN()
	}
	if h.Tasks == 0 {
		h.Delta, h.DeltaCI = math.NaN(), math.NaN()
		return h
	}
	t := float64(h.Tasks)
	h.Delta /= t
	h.DeltaCI = tQuantile975(df) * math.Sqrt(se2) / t
	return h
}

// meanSE returns the mean and the standard error of the mean (sample
// standard deviation / sqrt(n); 0 for one value).
func meanSE(xs []float64) (mean, se float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	var ss float64
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss/float64(len(xs)-1)) / math.Sqrt(float64(len(xs)))
}

// tQuantile975 is the two-sided 95% t quantile with df degrees of freedom
// (Student's t 0.975 quantile). With df 0 the interval is unknown: 0 is
// returned, as the standard error is 0 then too.
func tQuantile975(df int) float64 {
	if df <= 0 {
		return 0
	}
	return distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(df)}.Quantile(0.975)
}

func beta(direction string) float64 {
	if direction == schemas.LowerIsBetter {
		return -1
	}
	return 1
}

func better(direction string, a, b float64) bool {
	if direction == schemas.LowerIsBetter {
		return a < b
	}
	return a > b
}

func splitOrder(s string) int {
	if s == schemas.HeldOut {
		return 0
	}
	return 1
}

// methodRank is a method's place in report order (known methods first).
func methodRank(m string) int {
	if i := slices.Index(AllMethods, m); i >= 0 {
		return i
	}
	return len(AllMethods)
}

// sortMethods puts known methods in report order, others after them.
func sortMethods(ms []string) {
	sort.SliceStable(ms, func(i, j int) bool {
		if methodRank(ms[i]) != methodRank(ms[j]) {
			return methodRank(ms[i]) < methodRank(ms[j])
		}
		return ms[i] < ms[j]
	})
}

// validSteps counts the steps of the trajectories and those whose action
// the environment accepted.
func validSteps(rows []schemas.EvalResult) (steps, valid int) {
	for _, r := range rows {
		for _, o := range r.Outcomes {
			steps++
			if env.Accepted(env.Outcome(o)) {
				valid++
			}
		}
	}
	return steps, valid
}

// ratio is a/b, 0 when b is 0 (JSON has no NaN).
func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
