package train

import "github.com/mlerl/mlerl/policy"

// Packing: SFT examples and PPO (state, action) samples are packed into
// rows of at most ctx tokens, several examples per row; positions restart
// and segments number the examples, so attention stays inside an example
// (see policy.Batch).

// encoded is one example as model ids: BOS prompt response; Response is
// the index of the first response token.
type encoded struct {
	Tokens   []int32
	Response int
	// Weight is the loss weight of each response token (0: 1).
	Weight float32
	// Act, when Act[1] > Act[0], is the span of Tokens that writes the
	// action's name (actionSpan): the decision among the tools, a few
	// tokens of a response the answer format otherwise fixes. Its targets
	// are marked in the packed batch (packedBatch.Act) and weighted
	// ActWeight times more (0: 1).
	Act       [2]int
	ActWeight float32
}

// packedBatch is a batch of packed rows with next-token targets and loss
// weights (the example's weight, 1 unless it says otherwise, where the
// target is a response token, else 0).
type packedBatch struct {
	policy.Batch
	Targets []int32
	Weights []float32
	// Act marks the targets that are tokens of an action's name.
	Act []bool
	// Real counts non-padding tokens; NumTargets weighted targets.
	Real, NumTargets int
	// Starts holds each example's first flat index, by position in the
	// packing order.
	Starts []int
}

// packWindow is how many of the latest rows packBatches tries to fit an
// example into.
const packWindow = 64

// packBatches packs the examples, in order, into rows of at most ctx
// tokens (each example goes to the first of the last packWindow rows with
// room, else starts a row) and groups rows into batches. A batch's width
// is its longest row rounded up to a multiple of 32, so padding is only
// each row's tail.
func packBatches(exs []encoded, order []int, rowsPerBatch, ctx int) []packedBatch {
	var rows [][]int // positions in order, per row
	var used []int
	for oi := range order {
		n := len(exs[order[oi]].Tokens)
		placed := false
		// First fit among the most recent rows: fills the tails that a
		// purely sequential packing leaves (31% padding on the benchmark
		// data) while keeping the epoch's order roughly intact.
		for r := max(0, len(rows)-packWindow); r < len(rows); r++ {
			if used[r]+n <= ctx {
				rows[r], used[r], placed = append(rows[r], oi), used[r]+n, true
				break
			}
		}
		if !placed {
			rows, used = append(rows, []int{oi}), append(used, n)
		}
	}
	var out []packedBatch
	for start := 0; start < len(rows); start += rowsPerBatch {
		group := rows[start:min(start+rowsPerBatch, len(rows))]
		width := 0
		for _, r := range group {
			n := 0
			for _, oi := range r {
				n += len(exs[order[oi]].Tokens)
			}
			width = max(width, n)
		}
		width = min(ctx, (width+31)/32*32)
		b := packedBatch{Batch: policy.Batch{B: len(group), S: width}}
		size := b.B * b.S
		b.Tokens, b.Positions, b.Segments = make([]int32, size), make([]int32, size), make([]int32, size)
		b.Targets, b.Weights, b.Act = make([]int32, size), make([]float32, size), make([]bool, size)
		b.Starts = make([]int, len(order))
		for ri, r := range group {
			at := ri * width
			for si, oi := range r {
				e := exs[order[oi]]
				w := e.Weight
				if w == 0 {
					w = 1
				}
				b.Starts[oi] = at
				for t, tok := range e.Tokens {
					k := at + t
					b.Tokens[k], b.Positions[k], b.Segments[k] = tok, int32(t), int32(si+1)
					if t+1 < len(e.Tokens) {
						b.Targets[k] = e.Tokens[t+1]
						if t+1 >= e.Response {
							b.Weights[k] = w
							if t+1 >= e.Act[0] && t+1 < e.Act[1] {
								b.Act[k] = true
								if e.ActWeight != 0 {
									b.Weights[k] = w * e.ActWeight
								}
							}
							b.NumTargets++
						}
					}
				}
				at += len(e.Tokens)
				b.Real += len(e.Tokens)
			}
		}
		out = append(out, b)
	}
	return out
}

// targets lists the weighted targets of a batch: their flat indices,
// target ids and weights, and whether each writes an action's name.
func (b packedBatch) targets() (idx, targets []int32, weights []float32, act []bool) {
	idx, targets, weights = make([]int32, 0, b.NumTargets), make([]int32, 0, b.NumTargets), make([]float32, 0, b.NumTargets)
	act = make([]bool, 0, b.NumTargets)
	for i, w := range b.Weights {
		if w != 0 {
			idx, targets, weights = append(idx, int32(i)), append(targets, b.Targets[i]), append(weights, w)
			act = append(act, b.Act != nil && b.Act[i])
		}
	}
	return idx, targets, weights, act
}
