package policy

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy/hf"
)

// A checkpoint is a folder of objects in a store (local or gs://), the
// same for both engines:
//
//	<dir>/step-<N>/config.json    the resolved stage config
//	<dir>/step-<N>/model.json     the model shape (Config)
//	<dir>/step-<N>/vocab.json     the vocabulary mapping
//	<dir>/step-<N>/state.json     the stage's resumable state
//	<dir>/step-<N>/weights.bin    every tensor, little-endian, back to back
//	<dir>/step-<N>/weights.json   the index of weights.bin: name, dtype,
//	                              dims, offset, bytes, and for optimiser
//	                              state the engine that wrote it
//	<dir>/latest                  "step-<N>", written last: the commit point
//	<dir>/metrics.jsonl           every update's metrics up to the latest step
//
// A Hugging Face policy's checkpoint has no vocab.json (model ids are its
// tokenizer's) but
//
//	<dir>/step-<N>/policy.json    its Source: the base folder (or GGUF
//	                              file), the sha256 of its config.json and
//	                              tokenizer.json (of the GGUF file), the
//	                              chat format and system message
//	<dir>/step-<N>/adapter/       with LoRA, the adapter in PEFT's layout
//	                              (adapter_config.json and
//	                              adapter_model.safetensors), which PEFT
//	                              loads on the base as it loads its own
//
// and its weights.bin holds only what trains (the adapters and the value
// head, or every weight with full fine-tuning): the frozen base is read
// from the folder (or file) policy.json names, checked against its hashes.
//
// Weights are named by Config.Params (GoMLX variable paths), so either
// engine loads what the other saved; optimiser state is engine-specific
// and restored only by the engine that wrote it. A run killed mid-write
// leaves latest pointing at the previous complete checkpoint.

// ckptVar is one tensor in weights.json.
type ckptVar struct {
	Path      string `json:"path"`
	DType     string `json:"dtype"`
	Dims      []int  `json:"dims"`
	Offset    int64  `json:"offset"`
	Bytes     int64  `json:"bytes"`
	Trainable bool   `json:"trainable"`
	// Optimizer names the engine whose optimiser state this is ("" for weights).
	Optimizer string `json:"optimizer,omitempty"`
}

// Checkpoint is what a stage saves and loads.
type Checkpoint struct {
	Config any    // the stage config, written as config.json
	Model  Config // model.json
	// Policy, when saving, is the policy the engine runs (nil: mlerl's
	// model with Vocab); its kind decides the layout.
	Policy  *Policy
	Vocab   *Vocab          // vocab.json (mlerl's model)
	Source  *Source         // policy.json (a Hugging Face policy)
	State   json.RawMessage // state.json
	Metrics []string        // the JSON lines of metrics.jsonl
	Weights []Tensor
	// Optimizer is the optimiser state and OptimizerEngine the engine that
	// wrote it (empty when the checkpoint has none).
	Optimizer       []Tensor
	OptimizerEngine string
	// Dir is the checkpoint folder key (step-<N>) it was read from.
	Dir string
}

// SaveCheckpoint writes ck, with the engine's weights and optimiser state,
// under dir/step-<step> and then points dir/latest at it.
func SaveCheckpoint(ctx context.Context, st store.Store, dir string, step int, eng Engine, ck Checkpoint) error {
	hfPolicy := ck.Policy != nil && ck.Policy.Kind() == KindHF
	weights := eng.Weights
	if hfPolicy {
		weights = func() ([]Tensor, error) { return TrainableWeights(eng) }
	}
	ws, err := weights()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	opt, err := eng.OptimizerState()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	sub := dir + "/" + StepFolder(step)
	var bin bytes.Buffer
	size := 0 // the whole file, so that the buffer grows (and is cleared) once
	for _, t := range append(slices.Clip(ws), opt...) {
		size += 4*len(t.F32) + 8*len(t.I64)
	}
	bin.Grow(size)
	var index []ckptVar
	add := func(t Tensor, optimizer string) {
		cv := ckptVar{Path: t.Name, Dims: t.Shape, Offset: int64(bin.Len()), Trainable: optimizer == "", Optimizer: optimizer}
		switch {
		case t.I64 != nil:
			cv.DType = "int64"
			binary.Write(&bin, binary.LittleEndian, t.I64)
		default:
			cv.DType = "float32"
			binary.Write(&bin, binary.LittleEndian, t.F32)
		}
		cv.Bytes = int64(bin.Len()) - cv.Offset
		index = append(index, cv)
	}
	for _, t := range ws {
		add(t, "")
	}
	for _, t := range opt {
		add(t, eng.Name())
	}
	files := map[string]any{"config.json": ck.Config, "model.json": eng.Config(), "state.json": ck.State, "weights.json": index}
	if hfPolicy {
		files["policy.json"] = ck.Policy.Source
		if err := writeAdapter(ctx, st, sub+"/"+AdapterFolder, ck.Policy, ws); err != nil {
			return err
		}
	} else {
		files["vocab.json"] = ck.Vocab
		if ck.Policy != nil {
			files["vocab.json"] = ck.Policy.Vocab()
		}
	}
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
	return store.WriteAll(ctx, st, dir+"/latest", []byte(StepFolder(step)+"\n"), store.CreateOptions{})
}

// StepFolder is the name of the checkpoint folder of a step, beside
// "latest" in its checkpoint folder.
func StepFolder(step int) string { return fmt.Sprintf("step-%09d", step) }

// SelectedFile names, beside "latest", the checkpoint a run selected by
// its declared rule (train ppo's select.rule; selection.json beside it
// says how).
const SelectedFile = "selected"

// Which checkpoint of a folder to read.
const (
	CheckpointSelected = "selected" // the one the run selected, else the latest
	CheckpointLast     = "last"     // the latest
)

// PickCheckpoint returns the folder key of dir's checkpoint named by
// which: CheckpointLast is LatestCheckpoint; CheckpointSelected (or "")
// is the one "selected" names when the run wrote it, else the latest
// (an SFT folder, a PPO run older than selection). how says which was
// taken. "" without error: dir holds no checkpoint.
func PickCheckpoint(ctx context.Context, st store.Store, dir, which string) (sub, how string, err error) {
	switch which {
	case CheckpointLast:
	case CheckpointSelected, "":
		b, err := store.ReadAll(ctx, st, dir+"/"+SelectedFile)
		if err == nil && strings.TrimSpace(string(b)) != "" {
			return dir + "/" + strings.TrimSpace(string(b)), "selected", nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return "", "", fmt.Errorf("checkpoint: %w", err)
		}
	default:
		return "", "", fmt.Errorf("checkpoint: %q: want %s or %s", which, CheckpointSelected, CheckpointLast)
	}
	sub, err = LatestCheckpoint(ctx, st, dir)
	return sub, "latest", err
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

// LoadCheckpoint reads the checkpoint folder sub. config and state, if not
// nil, receive config.json and state.json; ck.Config holds config.json
// raw. The metrics file beside sub is returned in ck.Metrics.
func LoadCheckpoint(ctx context.Context, st store.Store, sub string, config, state any) (*Checkpoint, error) {
	ck := &Checkpoint{Dir: sub, Vocab: &Vocab{}}
	switch b, err := store.ReadAll(ctx, st, sub+"/policy.json"); {
	case err == nil:
		ck.Source, ck.Vocab = &Source{}, nil
		if err := json.Unmarshal(b, ck.Source); err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w (the checkpoint is damaged; delete it or resume from an earlier one)", st.URI(sub+"/policy.json"), err)
		}
	case !errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	vocabFile := "vocab.json"
	if ck.Source != nil {
		vocabFile = "policy.json" // read above; a Hugging Face policy has no vocab.json
	}
	read := func(name string, v any) error {
		b, err := store.ReadAll(ctx, st, sub+"/"+name)
		if err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if name == "state.json" {
			ck.State = b
		}
		if name == "config.json" {
			ck.Config = json.RawMessage(b)
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
	for _, f := range []struct {
		name string
		v    any
	}{{"model.json", &ck.Model}, {vocabFile, ck.Vocab}, {"weights.json", &index}, {"config.json", config}, {"state.json", state}} {
		if ck.Source != nil && f.name == vocabFile {
			continue // read above
		}
		if err := read(f.name, f.v); err != nil {
			return nil, err
		}
	}
	for _, cv := range index {
		if cv.Path == "/pos_embed/embeddings" {
			return nil, fmt.Errorf("checkpoint %s was written by an older mlerl (learned absolute positions); this one uses rotary positions: train it again with `mlerl train sft`", st.URI(sub))
		}
	}
	if err := ck.Model.ValidateWithVocab(); err != nil {
		return nil, fmt.Errorf("checkpoint %s: model.json: %w", st.URI(sub), err)
	}
	if ck.Model.LoRA != nil && (ck.Model.BaseStorage == MatmulAuto || ck.Model.BaseStorage == "") {
		// Written before the stages resolved base_storage: auto meant
		// what the machine that builds the engine decides, as it still
		// does, here where the checkpoint is read.
		r, err := ResolvePrecision(ck.Model.BaseStorage)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: model.json: base storage: %w", st.URI(sub), err)
		}
		ck.Model.BaseStorage = r
	}
	if ck.Source == nil && ck.Model.Vocab != ck.Vocab.Size() {
		return nil, fmt.Errorf("checkpoint %s: model.json says vocab %d but vocab.json has %d ids", st.URI(sub), ck.Model.Vocab, ck.Vocab.Size())
	}
	bin, err := store.ReadAll(ctx, st, sub+"/weights.bin")
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	for _, cv := range index {
		if cv.Offset < 0 || cv.Offset+cv.Bytes > int64(len(bin)) {
			return nil, fmt.Errorf("checkpoint %s: tensor %s lies outside weights.bin", st.URI(sub), cv.Path)
		}
		n := 1
		for _, d := range cv.Dims {
			n *= d
		}
		raw := bin[cv.Offset : cv.Offset+cv.Bytes]
		t := Tensor{Name: cv.Path, Shape: cv.Dims}
		switch cv.DType {
		case "float32", "Float32":
			if int64(4*n) != cv.Bytes {
				return nil, fmt.Errorf("checkpoint %s: tensor %s has %d bytes, its shape needs %d", st.URI(sub), cv.Path, cv.Bytes, 4*n)
			}
			t.F32 = make([]float32, n)
			for i := range t.F32 {
				t.F32[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
		case "int64", "Int64":
			if int64(8*n) != cv.Bytes {
				return nil, fmt.Errorf("checkpoint %s: tensor %s has %d bytes, its shape needs %d", st.URI(sub), cv.Path, cv.Bytes, 8*n)
			}
			t.I64 = make([]int64, n)
			for i := range t.I64 {
				t.I64[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
			}
		default:
			continue // e.g. an RNG state of an older GoMLX checkpoint
		}
		if cv.Optimizer != "" {
			ck.Optimizer = append(ck.Optimizer, t)
			ck.OptimizerEngine = cv.Optimizer
		} else {
			ck.Weights = append(ck.Weights, t)
		}
	}
	if m, err := store.ReadAll(ctx, st, parentDir(sub)+"/metrics.jsonl"); err == nil {
		for _, line := range strings.SplitAfter(string(m), "\n") {
			if line != "" {
				ck.Metrics = append(ck.Metrics, line)
			}
		}
	}
	return ck, nil
}

// OpenPolicy opens the policy the checkpoint was trained as: mlerl's model
// with its vocab.json and the tokenizer named tokenizer (the SFT config's
// key), or the Hugging Face base its policy.json names (tokenizer is then
// not read), checked against the hashes recorded there.
func (ck *Checkpoint) OpenPolicy(tokenizer string) (*Policy, error) {
	if ck.Source != nil {
		p, err := openSource(ck.Source, ck.Model)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", ck.Dir, err)
		}
		return p, nil
	}
	tok, err := OpenTokenizer(tokenizer)
	if err != nil {
		return nil, err
	}
	return NewMLERL(ck.Model, ck.Vocab, tok), nil
}

// Engine makes an engine named name of policy p (nil: mlerl's model of
// the checkpoint's model.json) holding the checkpoint's weights, and its
// optimiser state when the same engine wrote it (resuming with the other
// engine starts a fresh optimiser; resumed says which).
func (ck *Checkpoint) Engine(p *Policy, name string, withOptimizer bool) (eng Engine, resumedOptimizer bool, err error) {
	if p == nil {
		p = NewMLERL(ck.Model, ck.Vocab, nil)
	}
	eng, err = p.NewEngine(name, 0, ck.Weights)
	if err != nil {
		return nil, false, fmt.Errorf("checkpoint %s: %w", ck.Dir, err)
	}
	if withOptimizer && len(ck.Optimizer) > 0 && ck.OptimizerEngine == name {
		if err := eng.SetOptimizerState(ck.Optimizer); err != nil {
			return nil, false, fmt.Errorf("checkpoint %s: %w", ck.Dir, err)
		}
		return eng, true, nil
	}
	return eng, false, nil
}

func parentDir(key string) string {
	if i := strings.LastIndex(key, "/"); i >= 0 {
		return key[:i]
	}
	return ""
}

// AdapterFolder is the PEFT adapter's folder in a Hugging Face policy's
// checkpoint step (with LoRA).
const AdapterFolder = "adapter"

// writeAdapter writes the adapters among ws in PEFT's layout under key
// (nothing without adapters).
func writeAdapter(ctx context.Context, st store.Store, key string, p *Policy, ws []Tensor) error {
	ad, err := p.Adapter(ws)
	if err != nil || ad == nil {
		return err
	}
	files, err := hf.AdapterFiles(ad)
	if err != nil {
		return fmt.Errorf("checkpoint: adapter: %w", err)
	}
	for _, name := range []string{hf.AdapterConfigFile, hf.AdapterWeightsFile} {
		if err := store.WriteAll(ctx, st, key+"/"+name, files[name], store.CreateOptions{}); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	return nil
}
