package native

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkQGemv measures the decode step's product of one input row
// with quantized matrices of SmolLM2-135M's shapes (k inputs, n
// outputs), each format, on the kernels in use (MLERL_NATIVE_KERNEL
// picks a tier), one thread, in the tasks gemvQuant cuts (qgemvRows
// outputs): weights per second and GB/s of blocks read. The matrices are
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
			b.Run(fmt.Sprintf("%s/%dx%d/%s", typ, k, n, kern.name), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					q := qs[i%copies]
					for j0 := 0; j0 < n; j0 += qgemvRows {
						kern.qgemv(ws, q, j0, min(qgemvRows, n-j0), x, k, 1, sx, y[j0:], n, false)
					}
				}
				sec := b.Elapsed().Seconds()
				b.ReportMetric(float64(k*n)*float64(b.N)/sec/1e9, "Gweights/s")
				b.ReportMetric(float64(proto.bytes())*float64(b.N)/sec/1e9, "GB/s")
			})
		}
	}
}

// bigStorageEnv names the base storage of BenchmarkGenerateBig's and
// BenchmarkLoRASFTBig's models: fp32 (unset: the default), bf16, q8_0,
// q4_0, q4_1, or gguf, SmolLM2's published file's (Q4_1 matrices, a Q8_0
// embedding). The weights are random, quantized where stored so: the
// kernels' speed does not depend on their values.
const bigStorageEnv = "MLERL_BIG_STORAGE"

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
