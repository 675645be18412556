package onnxpeer

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/mlerl/mlerl/policy/native"
)

// peerShape is the demo policy's shape as policy/native's
// BenchmarkGenerateShared runs it (its ppoShape: policy.DemoConfig with a
// 4,096-id vocabulary and a 640-token context).
func peerShape() native.Config {
	return native.Config{Vocab: 4096, DModel: 256, Heads: 4, Layers: 4, FFN: 1024, Ctx: 640}
}

// cpuSeconds is the process's user+system CPU time: every thread's,
// ONNX Runtime's included (as policy/native's benchmarks measure it).
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// peerEngine is what the benchmark needs of either engine: prefill every
// row, then decode one token per row.
type peerEngine interface {
	prefill(prompts [][]int32) ([]float32, error)
	decode(tokens []int32) ([]float32, error)
}

type nativePeer struct {
	m   *native.Model
	c   *native.Cache
	all []int
}

func (p *nativePeer) prefill(prompts [][]int32) ([]float32, error) {
	for i := range p.all {
		p.c.Reset(i)
	}
	return p.m.Extend(p.c, p.all, prompts)
}

func (p *nativePeer) decode(tokens []int32) ([]float32, error) { return p.m.Decode(p.c, p.all, tokens) }

type ortPeer struct {
	r *Runner
	c *Cache
}

func (p *ortPeer) prefill(prompts [][]int32) ([]float32, error) { return p.r.Prefill(p.c, prompts) }
func (p *ortPeer) decode(tokens []int32) ([]float32, error)     { return p.r.Decode(p.c, tokens) }

// BenchmarkGeneratePeer measures generation on the demo policy's shape
// with the same weights in both engines, the native one (policy/native,
// its pool of GOMAXPROCS workers) and ONNX Runtime (this package's
// graphs, GOMAXPROCS intra-op threads): "ort" decodes with
// Graphs.Decode and its intra-op threads spin between tasks (ONNX
// Runtime's default), "ort-nospin" does not spin, "ort-inplace-nospin"
// decodes in place (Graphs.DecodeInPlace) without spinning. 448-token
// prompts (different per row), prefilled together, then 96 greedy decode
// steps, batch 1 and 32. Each engine holds its own KV cache.
//
// prefill_ms is one prefill of the whole batch (wall); prefill_tok/s
// and prefill_tok/cpu-s count its prompt tokens; decode_tok/s and
// decode_tok/cpu-s count the new tokens over the decode steps only;
// new_tok/s and new_tok/cpu-s over the whole generation, prefill
// included. CPU time is the process's (every thread's).
func BenchmarkGeneratePeer(b *testing.B) {
	const promptLen, newTokens = 448, 96
	lib, err := Library()
	if err != nil {
		b.Skip("ONNX Runtime library not installed: run `make setup`")
	}
	cfg := peerShape()
	m, err := native.New(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	g, err := Export(m)
	if err != nil {
		b.Fatal(err)
	}
	threads := runtime.GOMAXPROCS(0)
	runners := map[string]*Runner{}
	engines := []string{"native", "ort", "ort-nospin", "ort-inplace-nospin"}
	for _, name := range engines[1:] {
		r, err := New(g, Options{LibraryPath: lib, Threads: threads, NoSpinning: name != "ort", InPlace: name == "ort-inplace-nospin"})
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		runners[name] = r
	}
	warmed := map[string]bool{}
	for _, rows := range []int{1, 32} {
		r := rand.New(rand.NewPCG(5, 6))
		prompts := make([][]int32, rows)
		for i := range prompts {
			for range promptLen {
				prompts[i] = append(prompts[i], int32(r.IntN(cfg.Vocab)))
			}
		}
		for _, engine := range engines {
			name := fmt.Sprintf("engine=%s/batch=%d", engine, rows)
			b.Run(name, func(b *testing.B) {
				var e peerEngine
				if engine == "native" {
					c, err := m.NewCache(rows, promptLen+newTokens)
					if err != nil {
						b.Fatal(err)
					}
					all := make([]int, rows)
					for i := range all {
						all[i] = i
					}
					e = &nativePeer{m: m, c: c, all: all}
				} else {
					c, err := runners[engine].NewCache(rows, promptLen+newTokens)
					if err != nil {
						b.Fatal(err)
					}
					e = &ortPeer{r: runners[engine], c: c}
				}
				if !warmed[name] { // once: buffers, arenas and kernels settle
					warmed[name] = true
					if _, err := generate(e, prompts, 2, cfg.Vocab); err != nil {
						b.Fatal(err)
					}
				}
				var t phaseTimes
				b.ResetTimer()
				for range b.N {
					pt, err := generate(e, prompts, newTokens, cfg.Vocab)
					if err != nil {
						b.Fatal(err)
					}
					t.add(pt)
				}
				n := float64(b.N * rows * newTokens)
				prompt := float64(b.N * rows * promptLen)
				b.ReportMetric(t.prefill/float64(b.N)*1e3, "prefill_ms")
				b.ReportMetric(prompt/t.prefill, "prefill_tok/s")
				b.ReportMetric(prompt/t.prefillCPU, "prefill_tok/cpu-s")
				b.ReportMetric(n/t.decode, "decode_tok/s")
				b.ReportMetric(n/t.decodeCPU, "decode_tok/cpu-s")
				b.ReportMetric(n/(t.prefill+t.decode), "new_tok/s")
				b.ReportMetric(n/(t.prefillCPU+t.decodeCPU), "new_tok/cpu-s")
				b.ReportMetric(float64(threads), "threads")
			})
		}
	}
}

// phaseTimes is wall and CPU seconds of the prefill and decode phases.
type phaseTimes struct{ prefill, prefillCPU, decode, decodeCPU float64 }

func (t *phaseTimes) add(o phaseTimes) {
	t.prefill, t.prefillCPU = t.prefill+o.prefill, t.prefillCPU+o.prefillCPU
	t.decode, t.decodeCPU = t.decode+o.decode, t.decodeCPU+o.decodeCPU
}

// generate prefills prompts and runs n greedy decode steps (as
// policy/native's BenchmarkGenerate: each step feeds the argmax of the
// last logits), timing both phases.
func generate(e peerEngine, prompts [][]int32, n, vocab int) (phaseTimes, error) {
	var t phaseTimes
	start, cpu0 := time.Now(), cpuSeconds()
	logits, err := e.prefill(prompts)
	if err != nil {
		return t, err
	}
	mid, cpu1 := time.Now(), cpuSeconds()
	t.prefill, t.prefillCPU = mid.Sub(start).Seconds(), cpu1-cpu0
	toks := make([]int32, len(prompts))
	for range n {
		for i := range toks {
			toks[i] = Argmax(logits[i*vocab : (i+1)*vocab])
		}
		if logits, err = e.decode(toks); err != nil {
			return t, err
		}
	}
	t.decode, t.decodeCPU = time.Since(mid).Seconds(), cpuSeconds()-cpu1
	return t, nil
}
