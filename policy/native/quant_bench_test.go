package native

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mlerl/mlerl/policy/ggml"
)

// BenchmarkQGemv measures the decode step's product of one input row
// with quantized matrices of SmolLM2-135M's shapes (k inputs, n
// outputs), each format, float32 and int8 inputs (quant8.go), on the
// kernels in use (MLERL_NATIVE_KERNEL picks a tier), one thread, in the
// tasks gemvQuant cuts (qgemvRows outputs): weights per second (wall and
// CPU) and GB/s of blocks read. The matrices are
// cycled over 96 MB of copies, a decode step's worth, so that the blocks
// come from beyond the L2 cache as they do in decoding.
func BenchmarkQGemv(b *testing.B) {
	if err := selectKernels(); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, typ := range []quantType{qQ4_1, qQ4_0, qQ8_0} {
		for _, s := range [][2]int{{576, 1536}, {1536, 576}, {576, 576}} {
			k, n := s[0], s[1]
			proto := randQmat(r, typ, n, k, 0.05)
			copies := max(1, (96<<20)/proto.bytes())
			qs := make([]*qmat, copies)
			for i := range qs {
				qs[i] = &qmat{typ: typ, rows: n, cols: k, nb: proto.nb, rowBytes: proto.rowBytes, data: append([]byte(nil), proto.data...)}
			}
			x := make([]float32, k)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			sx := make([]float32, qsxStride(proto.nb))
			qBlockSums(sx, x)
			y := make([]float32, n)
			ws := &workspace{}
			var in q8Input
			quantizeInput8(&in, x, k, 1, proto.nb)
			if kern.qprep8 != nil {
				kern.qprep8(&in, typ)
			}
			for _, int8 := range []bool{false, true} {
				name := fmt.Sprintf("%s/%dx%d/%s", typ, k, n, kern.name)
				if int8 {
					name += "/int8"
				}
				b.Run(name, func(b *testing.B) {
					c0 := cpuSeconds()
					for i := 0; i < b.N; i++ {
						q := qs[i%copies]
						for j0 := 0; j0 < n; j0 += qgemvRows {
							if int8 {
								kern.qgemv8(ws, q, j0, min(qgemvRows, n-j0), &in, y[j0:], n, false)
							} else {
								kern.qgemv(ws, q, j0, min(qgemvRows, n-j0), x, k, 1, sx, y[j0:], n, false)
							}
						}
					}
					sec, cpu := b.Elapsed().Seconds(), cpuSeconds()-c0
					b.ReportMetric(float64(k*n)*float64(b.N)/sec/1e9, "Gweights/s")
					b.ReportMetric(float64(k*n)*float64(b.N)/cpu/1e9, "Gweights/cpu-s")
					b.ReportMetric(float64(proto.bytes())*float64(b.N)/sec/1e9, "GB/s")
				})
			}
		}
	}
}

// bigStorageEnv names the base storage of BenchmarkGenerateBig's and
// BenchmarkLoRASFTBig's models: fp32 (unset: the default), bf16, q8_0,
// q4_0, q4_1, or gguf, SmolLM2's published file's (Q4_1 matrices, a Q8_0
// embedding). The weights are random, quantized where stored so: the
// kernels' speed does not depend on their values.
const bigStorageEnv = "MLERL_BIG_STORAGE"

// bigActivationsEnv sets the activations of the products with quantized
// blocks (SetQuantActivations: fp32, the default, or int8).
const bigActivationsEnv = "MLERL_BIG_ACTIVATIONS"

// newBigModel builds the model of shape cfg with opt and the storage and
// activations bigStorageEnv and bigActivationsEnv name, seed 1.
func newBigModel(b *testing.B, cfg Config, opt Options) (*Model, error) {
	m, err := NewWithOptions(cfg, bigOptions(b, opt), 1)
	if err != nil {
		return nil, err
	}
	if _, err := m.SetQuantActivations(envOr(bigActivationsEnv, ActivationsFP32)); err != nil {
		return nil, err
	}
	return m, nil
}

// bigOptions is opt with the base storage bigStorageEnv names; a base
// stored otherwise than in float32 is frozen (Options.Frozen) when opt
// has no adapters.
func bigOptions(b *testing.B, opt Options) Options {
	switch s := envOr(bigStorageEnv, MatmulFP32); s {
	case MatmulFP32:
	case "gguf":
		opt.BaseStorage = StorageQ4_1
		opt.MatrixStorage = map[string]string{"/token_embed/embeddings": StorageQ8_0}
	case MatmulBF16, StorageQ8_0, StorageQ4_0, StorageQ4_1:
		opt.BaseStorage = s
	default:
		b.Fatalf("%s=%q: want fp32, bf16, q8_0, q4_0, q4_1 or gguf", bigStorageEnv, s)
	}
	opt.Frozen = opt.LoRA.Rank == 0 && (opt.BaseStorage != "" || opt.MatrixStorage != nil)
	return opt
}

// BenchmarkQGemvRaw measures the decode step's product of one input row
// with a matrix in each raw format (kept as a GGUF file stores it:
// qgemvRaw dequantizes each row, then its dot product, or for Q4_K, Q5_K
// and Q6_K takes ggml's fused dot product: both forms measured) of the shape of
// SmolLM2-135M's ffn_down (1536 inputs, 576 outputs: the matrices
// llama.cpp's Q4_K_M stores in Q4_K and Q6_K), against the float32
// product with the same values (kernels.gemv: what a base dequantized on
// load computes), one thread, matrices cycled over 96 MB of copies as in
// BenchmarkQGemv. Metrics: weights per second (wall and CPU) and GB/s of
// the storage read.
func BenchmarkQGemvRaw(b *testing.B) {
	if err := selectKernels(); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	const k, n = 1536, 576
	x := make([]float32, k)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	y := make([]float32, n)
	ws := &workspace{}
	// Two to eight input rows (evaluation's lockstep episodes, at most
	// gemmSmallM) for the formats with a two-row fused form: weights/s
	// counts each weight once per row.
	xs, ys := make([]float32, 8*k), make([]float32, 8*n)
	copy(xs, x)
	for i := k; i < 8*k; i++ {
		xs[i] = float32(r.NormFloat64())
	}
	report := func(b *testing.B, c0 float64, rows, bytes int) {
		sec, cpu := b.Elapsed().Seconds(), cpuSeconds()-c0
		b.ReportMetric(float64(rows*k*n)*float64(b.N)/sec/1e9, "Gweights/s")
		b.ReportMetric(float64(rows*k*n)*float64(b.N)/cpu/1e9, "Gweights/cpu-s")
		b.ReportMetric(float64(bytes)*float64(b.N)/sec/1e9, "GB/s")
	}
	for _, typ := range []quantType{qQ4_K, qQ6_K, qQ5_K, qQ3_K, qQ2_K, qIQ4_XS, qQ5_1} {
		proto := newQmat(typ, n, k)
		proto.setBlocks(randRawBlocks(r, typ, n*k/typ.blockValues()))
		copies := max(1, (96<<20)/proto.bytes())
		qs := make([]*qmat, copies)
		for i := range qs {
			qs[i] = &qmat{typ: typ, rows: n, cols: k, nb: proto.nb, rowBytes: proto.rowBytes, data: append([]byte(nil), proto.data...)}
		}
		forms := []bool{false}
		if typ.raw().HasDot() {
			forms = []bool{true, false}
		}
		for _, rows := range []int{1, 2, 4, 8} {
			if rows > 1 && !typ.raw().HasDot2() {
				continue
			}
			for _, fused := range forms {
				name := fmt.Sprintf("%s/%dx%d/%s", typ, k, n, kern.name)
				if rows > 1 {
					name += fmt.Sprintf("/rows=%d", rows)
				}
				if len(forms) > 1 {
					name += map[bool]string{true: "/fused", false: "/dequant"}[fused]
				}
				b.Run(name, func(b *testing.B) {
					defer func(was bool) { fusedRawDot = was }(fusedRawDot)
					fusedRawDot = fused
					c0 := cpuSeconds()
					for i := 0; i < b.N; i++ {
						q := qs[i%copies]
						for j0 := 0; j0 < n; j0 += qgemvRows {
							qgemvRaw(ws, q, j0, min(qgemvRows, n-j0), xs, k, rows, ys[j0:], n, false)
						}
					}
					report(b, c0, rows, proto.bytes())
				})
			}
			if f := typ.raw(); f.HasDotQ8() {
				// int8 inputs (gemvRaw with op.q8): each product quantizes
				// its input rows once, counted in the time.
				q8 := make([]ggml.Q8K, rows)
				b.Run(fmt.Sprintf("%s/%dx%d/%s/rows=%d/int8", typ, k, n, kern.name, rows), func(b *testing.B) {
					c0 := cpuSeconds()
					for i := 0; i < b.N; i++ {
						q := qs[i%copies]
						for r := range q8 {
							q8[r].Quantize(xs[r*k : (r+1)*k])
						}
						for j0 := 0; j0 < n; j0 += qgemvRows {
							qgemvRawQ8(ws, q, f, j0, min(qgemvRows, n-j0), q8, ys[j0:], n, false)
						}
					}
					report(b, c0, rows, proto.bytes())
				})
			}
		}
	}
	// The float32 product: B as the dense layer holds it ([in, out]).
	w := make([]float32, k*n)
	for i := range w {
		w[i] = float32(0.05 * r.NormFloat64())
	}
	copies := max(1, (96<<20)/(4*k*n))
	ws32 := make([][]float32, copies)
	for i := range ws32 {
		ws32[i] = append([]float32(nil), w...)
	}
	b.Run(fmt.Sprintf("fp32/%dx%d/%s", k, n, kern.name), func(b *testing.B) {
		c0 := cpuSeconds()
		for i := 0; i < b.N; i++ {
			kern.gemv(x, ws32[i%copies], n, y, false)
		}
		report(b, c0, 1, 4*k*n)
	})
}
