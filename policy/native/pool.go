package native

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/mlerl/mlerl/policy/ggml"
)

// pool is a small fixed set of worker goroutines that block on a channel
// between jobs (no spinning: a busy neighbour on the machine costs us only
// the time it really takes). The calling goroutine works too, as worker 0.
//
// A job is a count of independent tasks; workers claim tasks one at a time
// from an atomic counter, so a worker that the OS descheduled holds up at
// most the one task it is running. The caller waits for the tasks, not for
// the helpers: a helper that wakes up late finds nothing left and goes back
// to sleep.
//
// Jobs are serialised by a mutex, so the package-level pool can be shared
// by several models; tasks must not start jobs of their own.
type pool struct {
	mu      sync.Mutex
	workers int
	wake    chan *job
	ws      []workspace // one per worker; index = worker id
	gemmMu  sync.Mutex  // held by gemm while it uses sharedB
	sharedB []float32   // a transposed B packed once per gemm call
	bf16A   []uint32    // gemmBF16: A converted to bf16 pairs
	bf16B   []uint32    // gemmBF16: B converted and packed
	qsx     []float32   // gemvQuant: the input rows' block sums (Q4_1)
	q8      q8Input     // gemvQuant: the input rows quantized to int8
	q8k     []ggml.Q8K  // gemvRaw: the input rows quantized to int8 per 256 (K-quants)
}

type job struct {
	fn   func(w, t int)
	n    int64
	next atomic.Int64
	done sync.WaitGroup
}

var (
	sharedPool     *pool
	sharedPoolOnce sync.Once
)

// workers returns the package's pool, started on first use with
// runtime.GOMAXPROCS(0) workers.
func workers() *pool {
	sharedPoolOnce.Do(func() { sharedPool = newPool(runtime.GOMAXPROCS(0)) })
	return sharedPool
}

func newPool(n int) *pool {
	n = max(n, 1)
	p := &pool{workers: n, wake: make(chan *job, 64), ws: make([]workspace, n)}
	for w := 1; w < n; w++ {
		go p.loop(w)
	}
	return p
}

func (p *pool) loop(w int) {
	for j := range p.wake {
		j.work(w)
	}
}

func (j *job) work(w int) {
	for {
		t := j.next.Add(1) - 1
		if t >= j.n {
			return
		}
		j.fn(w, int(t))
		j.done.Done()
	}
}

// run calls fn(w, t) for every task t in [0, n), spread over the workers;
// w identifies the worker, so fn may use p.ws[w] as scratch. It returns
// when all tasks are done.
func (p *pool) run(n int, fn func(w, t int)) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if n == 1 || p.workers == 1 {
		for t := 0; t < n; t++ {
			fn(0, t)
		}
		return
	}
	j := &job{fn: fn, n: int64(n)}
	j.done.Add(n)
	for i := 0; i < min(p.workers-1, n-1); i++ {
		select {
		case p.wake <- j:
		default: // every helper already has work queued; we do it ourselves
		}
	}
	j.work(0)
	j.done.Wait()
}

// parallelMinWork is the least work (multiply-adds, or similar simple
// steps) worth spreading over the workers: ~30-50 µs on one core. Below
// it, waking a helper costs about as much as it saves, and a helper that
// the OS deschedules while it holds a task (another process on the core)
// would stall the caller for a whole time slice.
const parallelMinWork = 1 << 20

// runWork is run for a job of about work steps in all: it runs serially
// on the caller when that is below parallelMinWork.
func (p *pool) runWork(n, work int, fn func(w, t int)) {
	if work < parallelMinWork && n > 1 {
		p.run(1, func(w, _ int) {
			for t := 0; t < n; t++ {
				fn(w, t)
			}
		})
		return
	}
	p.run(n, fn)
}

// chunks splits [0, n) into pieces of about grain items and runs fn on each
// (lo, hi) in parallel. The split depends only on n and grain, never on the
// number of workers, so reductions done per chunk give the same bits on
// any machine.
func (p *pool) chunks(n, grain int, fn func(w, lo, hi int)) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	tasks := (n + grain - 1) / grain
	p.run(tasks, func(w, t int) {
		fn(w, t*grain, min(n, (t+1)*grain))
	})
}

// workspace is one worker's scratch memory, grown on demand and reused.
type workspace struct {
	packA, packB []float32  // GEMM: ragged rows of A, transposed B
	edgeB        []float32  // GEMM: ragged columns of B
	tileB        []float32  // GEMM: a tile's own packed B (gemmFusedB)
	tile         []float32  // GEMM edge tile
	buf          []float32  // attention scores, softmax rows, ...
	bf16Row      []uint32   // gemmBF16: a panel's rows of a transposed B, converted, before their transpose
	bf16A, bf16B []uint32   // gemmBF16Serial: converted A and B
	attT, attB   bf16Panels // attention: a head's keys or values converted once (attnPanels)
	qpanel       []float32  // gemmQuant: a block of B's columns dequantized into panels
	qpairs       []uint32   // gemmQuant: the same panels converted to bf16 pairs
	qrow         []float32  // gemmQuant: one row of a quantized matrix dequantized
	qscratch     []float32  // the quantized kernels' scratch (converted scales, masks)
	qx           []float32  // the quantized R-row kernels' interleaved inputs, outputs and scales
	// op is the bf16 product this worker converts (gemmSerial,
	// attnPanels): the conversion's closures take its address, which
	// would put a local gemmOp on the heap for every product.
	op gemmOp
}

// grow returns s resized to n elements, reusing its storage when it is
// large enough. The contents are not cleared. The headroom keeps batches
// of varying sizes from reallocating (and waking the GC) step after step.
func grow(s []float32, n int) []float32 {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]float32, n, n+n/2)
}

// growInt32 is grow for []int32.
func growInt32(s []int32, n int) []int32 {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]int32, n, n+n/2)
}

func zero(s []float32) { clear(s) }
