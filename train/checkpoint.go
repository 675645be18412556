package train

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/mlerl/mlerl/internal/store"
)

// A checkpoint is a folder of objects in a store (local or gs://):
//
//	<dir>/step-<N>/config.json    the resolved stage config
//	<dir>/step-<N>/model.json     the model shape
//	<dir>/step-<N>/vocab.json     the vocabulary mapping
//	<dir>/step-<N>/state.json     step, data position, RNG state, stage state
//	<dir>/step-<N>/weights.bin    every variable: weights, AdamW moments,
//	                              global step, GoMLX RNG state
//	<dir>/step-<N>/weights.json   the index of weights.bin
//	<dir>/latest                  "step-<N>", written last: the commit point
//	<dir>/metrics.jsonl           every update's metrics up to the latest step
//
// A run killed mid-write leaves latest pointing at the previous complete
// checkpoint, so resuming is exact.

// ckptVar is one variable in weights.json.
type ckptVar struct {
	Path   string `json:"path"`
	DType  string `json:"dtype"`
	Dims   []int  `json:"dims"`
	Offset int64  `json:"offset"`
	Bytes  int64  `json:"bytes"`
	Train  bool   `json:"trainable"`
}

// Checkpoint is what a stage saves besides the variables.
type Checkpoint struct {
	Config any             `json:"-"`
	Model  ModelConfig     `json:"-"`
	Vocab  *Vocab          `json:"-"`
	State  json.RawMessage `json:"-"`
	// Metrics are the JSON lines written so far.
	Metrics []string `json:"-"`
}

// SaveCheckpoint writes the policy's variables and ck under dir/step-<step>
// and then points dir/latest at it.
func SaveCheckpoint(ctx context.Context, st store.Store, dir string, step int, p *Policy, ck Checkpoint) error {
	sub := fmt.Sprintf("%s/step-%09d", dir, step)
	var bin bytes.Buffer
	var index []ckptVar
	for v := range p.Store.IterVariables() {
		t, err := v.Value()
		if err != nil {
			return fmt.Errorf("checkpoint: variable %s: %w", v.Path(), err)
		}
		cv := ckptVar{Path: v.Path(), DType: t.DType().String(), Dims: t.Shape().Dimensions, Offset: int64(bin.Len()), Train: v.Trainable}
		if err := t.ConstBytes(func(b []byte) { bin.Write(b) }); err != nil {
			return fmt.Errorf("checkpoint: variable %s: %w", v.Path(), err)
		}
		cv.Bytes = int64(bin.Len()) - cv.Offset
		index = append(index, cv)
	}
	files := map[string]any{"config.json": ck.Config, "model.json": ck.Model, "vocab.json": ck.Vocab, "state.json": ck.State, "weights.json": index}
	for name, v := range files {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("checkpoint: %s: %w", name, err)
		}
		if err := store.WriteAll(ctx, st, sub+"/"+name, b, store.CreateOptions{}); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	if err := store.WriteAll(ctx, st, sub+"/weights.bin", bin.Bytes(), store.CreateOptions{}); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := store.WriteAll(ctx, st, dir+"/metrics.jsonl", []byte(strings.Join(ck.Metrics, "")), store.CreateOptions{}); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return store.WriteAll(ctx, st, dir+"/latest", []byte(fmt.Sprintf("step-%09d\n", step)), store.CreateOptions{})
}

// LatestCheckpoint returns the folder key of dir's latest complete
// checkpoint, or "" when there is none.
func LatestCheckpoint(ctx context.Context, st store.Store, dir string) (string, error) {
	b, err := store.ReadAll(ctx, st, dir+"/latest")
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	return dir + "/" + strings.TrimSpace(string(b)), nil
}

// LoadOptions select what LoadCheckpoint restores.
type LoadOptions struct {
	// WeightsOnly skips the optimizer's variables (AdamW moments, steps):
	// PPO starts its own optimizer from the SFT weights.
	WeightsOnly bool
}

// LoadCheckpoint reads the checkpoint folder sub: a policy with its
// variables restored, plus the rest. config and state, if not nil, receive
// config.json and state.json. The metrics file beside sub is returned in
// ck.Metrics.
func LoadCheckpoint(ctx context.Context, st store.Store, sub string, backend compute.Backend, opts LoadOptions, config, state any) (*Policy, *Checkpoint, error) {
	ck := &Checkpoint{}
	read := func(name string, v any) error {
		b, err := store.ReadAll(ctx, st, sub+"/"+name)
		if err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if v == nil {
			return nil
		}
		if err := json.Unmarshal(b, v); err != nil {
			return fmt.Errorf("checkpoint %s: %w (the checkpoint is damaged; delete it or resume from an earlier one)", st.URI(sub+"/"+name), err)
		}
		return nil
	}
	var index []ckptVar
	ck.Vocab = &Vocab{}
	for name, v := range map[string]any{"model.json": &ck.Model, "vocab.json": ck.Vocab, "weights.json": &index, "config.json": config, "state.json": state} {
		if err := read(name, v); err != nil {
			return nil, nil, err
		}
	}
	bin, err := store.ReadAll(ctx, st, sub+"/weights.bin")
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	p, err := NewPolicy(backend, ck.Model, 0)
	if err != nil {
		return nil, nil, err
	}
	for _, cv := range index {
		if opts.WeightsOnly && isOptimizerVar(cv.Path) {
			continue
		}
		if cv.Offset < 0 || cv.Offset+cv.Bytes > int64(len(bin)) {
			return nil, nil, fmt.Errorf("checkpoint %s: variable %s lies outside weights.bin", st.URI(sub), cv.Path)
		}
		dt, err := dtypes.DTypeString(cv.DType)
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint %s: variable %s: %w", st.URI(sub), cv.Path, err)
		}
		t := tensors.FromShape(shapes.Make(dt, cv.Dims...))
		if t.Shape().ByteSize() != cv.Bytes {
			return nil, nil, fmt.Errorf("checkpoint %s: variable %s has %d bytes, its shape needs %d", st.URI(sub), cv.Path, cv.Bytes, t.Shape().ByteSize())
		}
		if err := t.MutableBytes(func(dst []byte) { copy(dst, bin[cv.Offset:cv.Offset+cv.Bytes]) }); err != nil {
			return nil, nil, err
		}
		if v := p.Store.GetVariable(cv.Path); v != nil {
			// Already made by NewPolicy (the RNG state).
			if err := v.SetValue(t); err != nil {
				return nil, nil, fmt.Errorf("checkpoint: variable %s: %w", cv.Path, err)
			}
			continue
		}
		v, err := p.Store.CreateVariable(cv.Path, t)
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint: variable %s: %w", cv.Path, err)
		}
		v.SetTrainable(cv.Train)
	}
	if m, err := store.ReadAll(ctx, st, parentDir(sub)+"/metrics.jsonl"); err == nil {
		for _, line := range strings.SplitAfter(string(m), "\n") {
			if line != "" {
				ck.Metrics = append(ck.Metrics, line)
			}
		}
	}
	return p, ck, nil
}

func parentDir(key string) string {
	if i := strings.LastIndex(key, "/"); i >= 0 {
		return key[:i]
	}
	return ""
}
