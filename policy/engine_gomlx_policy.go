package policy

import (
	"fmt"
	"slices"
	"sync"

	"github.com/gomlx/compute"

	"github.com/mlerl/mlerl/policy/native"
)

// gomlxPolicyEngine is the GoMLX engine of a Hugging Face policy (any
// architecture but mlerl's standard one): NewGomlxEngineArch's engine,
// whose Config is the policy's whole Config, so that model.json records
// the architecture and its tuning as the native engine's does.
type gomlxPolicyEngine struct {
	*gomlxEngine
	cfg Config
}

func (e *gomlxPolicyEngine) Config() Config { return e.cfg }

// newGomlxPolicyEngine builds the GoMLX engine of a non-standard
// architecture the way newNativeArch builds the native one: the weights
// native draws from seed (fresh adapters and value head), base and then
// weights written over them by name. cfg.BaseStorage bf16 keeps the
// frozen base in bfloat16 on the device (products stay float32);
// Recompute is the native engine's (XLA plans the graph's memory).
func newGomlxPolicyEngine(cfg Config, seed uint64, base weightSource, weights []Tensor) (Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var lora native.LoRAConfig
	if cfg.LoRA != nil {
		lora = cfg.LoRA.Native()
	}
	all, err := nativeInitialWeights(cfg.Native(), lora, seed, base != nil)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*Tensor, len(all))
	for i := range all {
		byName[all[i].Name] = &all[i]
	}
	set := func(t Tensor) error {
		w, ok := byName[t.Name]
		switch {
		case !ok:
			return fmt.Errorf("policy gomlx: the model has no weight %s (%s)", t.Name, cfg.describeArch())
		case t.Blocks != nil:
			return fmt.Errorf("policy gomlx: weight %s comes in %s blocks, which only the native engine keeps", t.Name, t.Quant)
		case !slices.Equal(w.Shape, t.Shape) || len(t.F32) != len(w.F32):
			return fmt.Errorf("policy gomlx: weight %s has shape %v (%d values), the model needs %v", t.Name, t.Shape, len(t.F32), w.Shape)
		}
		copy(w.F32, t.F32)
		return nil
	}
	if base != nil {
		if err := base(set); err != nil {
			return nil, err
		}
	}
	for _, t := range weights {
		if err := set(t); err != nil {
			return nil, err
		}
	}
	backend, err := policyBackend()
	if err != nil {
		return nil, err
	}
	e, err := NewGomlxEngineArch(cfg.Native(), lora, GomlxArchOptions{Backend: backend, Weights: all, Seed: seed, BaseStorage: cfg.BaseStorage})
	if err != nil {
		return nil, err
	}
	return &gomlxPolicyEngine{gomlxEngine: e.(*gomlxEngine), cfg: cfg}, nil
}

// policyBackend is the one backend of every Hugging Face policy's GoMLX
// engine in the process: train ppo holds two (the policy and its
// reference), and on a GPU each backend is a PJRT client that reserves
// its own share of the device's memory.
func policyBackend() (compute.Backend, error) {
	sharedPolicyBackend.once.Do(func() {
		sharedPolicyBackend.b, sharedPolicyBackend.err = NewBackend()
	})
	if sharedPolicyBackend.err != nil {
		return nil, fmt.Errorf("policy gomlx: GoMLX backend: %w", sharedPolicyBackend.err)
	}
	return sharedPolicyBackend.b, nil
}

var sharedPolicyBackend struct {
	once sync.Once
	b    compute.Backend
	err  error
}
