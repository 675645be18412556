package train

import (
	"fmt"
	"math"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/ml/model"
	"github.com/gomlx/gomlx/ml/train/optimizer"

	"github.com/mlerl/mlerl/internal/config"
)

// OptimConfig configures AdamW, the learning-rate schedule and clipping,
// shared by SFT and PPO.
type OptimConfig struct {
	LR          float64 `yaml:"lr" help:"peak learning rate"`
	MinLRRatio  float64 `yaml:"min_lr_ratio" help:"cosine floor as a fraction of lr"`
	WarmupSteps int     `yaml:"warmup_steps" help:"linear warmup steps"`
	WeightDecay float64 `yaml:"weight_decay" help:"AdamW decoupled weight decay"`
	Beta1       float64 `yaml:"beta1" help:"AdamW beta1"`
	Beta2       float64 `yaml:"beta2" help:"AdamW beta2"`
	ClipNorm    float64 `yaml:"clip_norm" help:"clip the global gradient norm to this (0: off)"`
}

// Validate checks the settings; keys in errors are relative ("lr"), a
// stage config nests them ("optim.lr").
func (o OptimConfig) Validate() error {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case !(o.LR > 0) || !finite(o.LR):
		return config.Errorf("lr", o.LR, "must be a positive number")
	case !(o.MinLRRatio >= 0 && o.MinLRRatio <= 1):
		return config.Errorf("min_lr_ratio", o.MinLRRatio, "must be in [0, 1] (a fraction of lr)")
	case o.WarmupSteps < 0:
		return config.Errorf("warmup_steps", o.WarmupSteps, "must not be negative")
	case !(o.WeightDecay >= 0) || !finite(o.WeightDecay):
		return config.Errorf("weight_decay", o.WeightDecay, "must be a number >= 0")
	case !(o.Beta1 >= 0 && o.Beta1 < 1):
		return config.Errorf("beta1", o.Beta1, "must be in [0, 1)")
	case !(o.Beta2 >= 0 && o.Beta2 < 1):
		return config.Errorf("beta2", o.Beta2, "must be in [0, 1)")
	case !(o.ClipNorm >= 0) || !finite(o.ClipNorm):
		return config.Errorf("clip_norm", o.ClipNorm, "must be a number >= 0 (0: off)")
	}
	return nil
}

// LRAt is the learning rate at step (0-based) of total: linear warmup to
// LR over WarmupSteps, then a cosine down to LR*MinLRRatio at total. It is
// computed on the host and fed to the graph, so a resumed run continues
// the same schedule.
func (o OptimConfig) LRAt(step, total int) float64 {
	if step < o.WarmupSteps {
		return o.LR * float64(step+1) / float64(o.WarmupSteps)
	}
	span := total - o.WarmupSteps
	if span <= 0 {
		return o.LR
	}
	frac := math.Min(1, float64(step-o.WarmupSteps)/float64(span))
	floor := o.LR * o.MinLRRatio
	return floor + (o.LR-floor)*0.5*(1+math.Cos(math.Pi*frac))
}

// lossFn builds a scalar loss and extra scalar metrics from the graph inputs.
type lossFn func(scope *model.Scope, inputs []*Node) (loss *Node, metrics []*Node)

// learner runs training steps of one loss on a policy: gradients, global
// norm clipping, AdamW with a host-fed learning rate.
type learner struct {
	p     *Policy
	optim OptimConfig
	step  *model.Exec
	eval  *model.Exec
}

type withGradients interface {
	UpdateGraphWithGradients(scope *model.Scope, grads []*Node, lossDType dtypes.DType)
}

func newLearner(p *Policy, o OptimConfig, loss lossFn) (*learner, error) {
	opt := optimizer.Adam().Betas(o.Beta1, o.Beta2).WeightDecay(o.WeightDecay).Epsilon(1e-8).Done()
	upd, ok := opt.(withGradients)
	if !ok {
		return nil, fmt.Errorf("train: the Adam optimizer does not take precomputed gradients")
	}
	l := &learner{p: p, optim: o}
	var err error
	// Inputs: the loss's own inputs, then the learning rate (last).
	l.step, err = model.NewExec(p.Backend, p.Store, func(scope *model.Scope, inputs []*Node) []*Node {
		lr := inputs[len(inputs)-1]
		theLoss, metrics := loss(scope, inputs[:len(inputs)-1])
		grads := scope.BuildTrainableVariablesGradientsGraph(theLoss)
		var sq *Node
		for _, g := range grads {
			s := ReduceAllSum(Square(g))
			if sq == nil {
				sq = s
			} else {
				sq = Add(sq, s)
			}
		}
		norm := Sqrt(sq)
		if o.ClipNorm > 0 {
			scale := Min(OnesLike(norm), Div(Scalar(norm.Graph(), norm.DType(), o.ClipNorm), Add(norm, Scalar(norm.Graph(), norm.DType(), 1e-6))))
			for i := range grads {
				grads[i] = Mul(grads[i], scale)
			}
		}
		optimizer.LearningRateVar(scope, dtypes.Float32, o.LR).SetNodeValue(lr)
		upd.UpdateGraphWithGradients(scope, grads, theLoss.DType())
		return append([]*Node{theLoss, norm}, metrics...)
	})
	if err != nil {
		return nil, fmt.Errorf("train: step graph: %w", err)
	}
	l.eval, err = model.NewExec(p.Backend, p.Store, func(scope *model.Scope, inputs []*Node) []*Node {
		theLoss, metrics := loss(scope, inputs)
		return append([]*Node{theLoss}, metrics...)
	})
	if err != nil {
		return nil, fmt.Errorf("train: eval graph: %w", err)
	}
	return l, nil
}

// Step runs one update; it returns the loss, the gradient norm (before
// clipping) and the loss's metrics.
func (l *learner) Step(inputs []any, lr float64) (loss, gradNorm float64, metrics []float64, err error) {
	outs, err := l.step.Exec(append(inputs, f32Tensor([]float32{float32(lr)}))...)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("train: step: %w", err)
	}
	vals, err := scalars(outs)
	if err != nil {
		return 0, 0, nil, err
	}
	return vals[0], vals[1], vals[2:], nil
}

// Eval computes the loss and metrics without updating.
func (l *learner) Eval(inputs []any) (loss float64, metrics []float64, err error) {
	outs, err := l.eval.Exec(inputs...)
	if err != nil {
		return 0, nil, fmt.Errorf("train: eval: %w", err)
	}
	vals, err := scalars(outs)
	if err != nil {
		return 0, nil, err
	}
	return vals[0], vals[1:], nil
}

func scalars(outs []*tensorsT) ([]float64, error) {
	vals := make([]float64, len(outs))
	for i, t := range outs {
		v, err := scalar(t)
		if err != nil {
			return nil, err
		}
		vals[i] = v
		t.FinalizeAll()
	}
	return vals, nil
}

// tokenLogProbs returns log pi(target) [B,S] and the entropy [B,S] of the
// policy's next-token distribution at every position.
func tokenLogProbs(logits, targets *Node) (logp, entropy *Node) {
	v := logits.Shape().Dimensions[logits.Rank()-1]
	all := LogSoftmax(logits, -1)
	oneHot := OneHot(targets, v, all.DType())
	logp = ReduceSum(Mul(all, oneHot), -1)
	entropy = Neg(ReduceSum(Mul(Exp(all), all), -1))
	return logp, entropy
}
