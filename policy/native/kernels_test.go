package native

import (
	"fmt"
	"math"
	"math/rand/v2"
	"syscall"
	"testing"
)

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(r.NormFloat64())
	}
	return s
}

// TestGemm checks every layout against a float64 triple loop, on odd
// sizes around the tile and block edges, with padded strides, serial and
// parallel, overwriting and accumulating.
func TestGemm(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	sizes := [][3]int{{1, 1, 1}, {1, 130, 77}, {1, 300, 260}, {2, 300, 260}, {3, 5, 7}, {4, 32, 16}, {5, 33, 129}, {6, 40, 33},
		{7, 50, 9}, {8, 64, 300}, {9, 17, 3}, {12, 33, 130}, {13, 64, 128}, {17, 70, 5}, {67, 45, 260}, {130, 300, 65}}
	forEachKernel(t, func(t *testing.T) {
		for _, sz := range sizes {
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					for _, acc := range []bool{false, true} {
						m, n, k := sz[0], sz[1], sz[2]
						name := fmt.Sprintf("%dx%dx%d ta=%v tb=%v acc=%v", m, n, k, ta, tb, acc)
						lda, ldb, ldc := k+3, n+1, n+5
						if ta {
							lda = m + 2
						}
						if tb {
							ldb = k + 1
						}
						a := randSlice(r, max(m, k)*lda)
						b := randSlice(r, max(n, k)*ldb)
						c0 := randSlice(r, m*ldc)
						want, bound := refGemm(ta, tb, m, n, k, a, lda, b, ldb, c0, ldc, acc, func(v float32) float64 { return float64(v) })
						for _, parallel := range []bool{false, true} {
							c := append([]float32(nil), c0...)
							op := gemmOp{ta: ta, tb: tb, m: m, n: n, k: k, a: a, lda: lda, b: b, ldb: ldb, c: c, ldc: ldc, acc: acc}
							if parallel {
								gemm(workers(), op)
							} else {
								gemmSerial(&workspace{}, op)
							}
							for i := range m {
								for j := range ldc {
									at := i*ldc + j
									if j >= n {
										if c[at] != c0[at] {
											t.Fatalf("%s: wrote outside C at (%d, %d)", name, i, j)
										}
										continue
									}
									if math.Abs(float64(c[at])-want[at]) > 1e-6*bound[at]+1e-6 {
										t.Fatalf("%s parallel=%v: C(%d,%d) = %g, want %g", name, parallel, i, j, c[at], want[at])
									}
								}
							}
						}
					}
				}
			}
		}
	})
}

// TestMicroKernels checks each micro-kernel (a whole mr x nr tile, and
// the wide kernel's mrw x nrw one) against a float64 sum, with A read
// row-major and k-major, B and C at strides wider than a tile,
// overwriting and accumulating, and that it writes nothing outside the
// tile.
func TestMicroKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	forEachKernel(t, func(t *testing.T) {
		type tileKernel struct {
			name   string
			micro  func(kc int, a []float32, ars, aks int, b []float32, ldb int, c []float32, ldc int, acc bool)
			mr, nr int
		}
		tks := []tileKernel{{"micro", kern.micro, kern.mr, kern.nr}}
		if kern.wide != nil {
			tks = append(tks, tileKernel{"wide", kern.wide, kern.mrw, kern.nrw})
		}
		for _, tk := range tks {
			testTileKernel(t, r, tk.name, tk.micro, tk.mr, tk.nr)
		}
	})
}

func testTileKernel(t *testing.T, r *rand.Rand, name string, micro func(kc int, a []float32, ars, aks int, b []float32, ldb int, c []float32, ldc int, acc bool), mr, nr int) {
	for _, kc := range []int{1, 2, 7, 128, 131} {
		for _, kmajor := range []bool{false, true} {
			for _, acc := range []bool{false, true} {
				ars, aks := kc+3, 1
				if kmajor {
					ars, aks = 1, mr+2
				}
				ldb, ldc := nr+5, nr+7
				a := randSlice(r, (mr-1)*ars+(kc-1)*aks+1)
				b := randSlice(r, (kc-1)*ldb+nr)
				c0 := randSlice(r, mr*ldc)
				c := append([]float32(nil), c0...)
				micro(kc, a, ars, aks, b, ldb, c, ldc, acc)
				for i := range mr {
					for j := range ldc {
						at := i*ldc + j
						if j >= nr {
							if c[at] != c0[at] {
								t.Fatalf("%s kc=%d kmajor=%v acc=%v: wrote outside the tile at (%d, %d)", name, kc, kmajor, acc, i, j)
							}
							continue
						}
						want, bound := 0.0, 0.0
						if acc {
							want, bound = float64(c0[at]), math.Abs(float64(c0[at]))
						}
						for p := range kc {
							x := float64(a[i*ars+p*aks]) * float64(b[p*ldb+j])
							want, bound = want+x, bound+math.Abs(x)
						}
						if math.Abs(float64(c[at])-want) > 1e-6*bound+1e-7 {
							t.Fatalf("%s kc=%d kmajor=%v acc=%v: C(%d,%d) = %g, want %g", name, kc, kmajor, acc, i, j, c[at], want)
						}
					}
				}
			}
		}
	}
}

// TestGemmTilesKeepBits checks that the parallel split (at least
// gemmMinTasks tiles, smaller than the serial 64 x 256 ones for products
// with few rows or columns, like the weight gradients) gives exactly the
// serial result: tiles must not change the order of any sum. So does
// gemmFusedB, whose tiles pack their own B.
func TestGemmTilesKeepBits(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	forEachKernel(t, func(t *testing.T) {
		for _, sz := range [][3]int{{128, 128, 700}, {40, 520, 300}, {520, 40, 300}, {200, 45, 530}} {
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					m, n, k := sz[0], sz[1], sz[2]
					lda, ldb := k, n
					if ta {
						lda = m
					}
					if tb {
						ldb = k
					}
					a, b := randSlice(r, max(m, k)*lda), randSlice(r, max(n, k)*ldb)
					want := make([]float32, m*n)
					gemmSerial(&workspace{}, gemmOp{ta: ta, tb: tb, m: m, n: n, k: k, a: a, lda: lda, b: b, ldb: ldb, c: want, ldc: n})
					for _, p := range []*pool{workers(), newPool(3)} {
						c := make([]float32, m*n)
						gemm(p, gemmOp{ta: ta, tb: tb, m: m, n: n, k: k, a: a, lda: lda, b: b, ldb: ldb, c: c, ldc: n})
						for i := range c {
							if c[i] != want[i] {
								t.Fatalf("%dx%dx%d ta=%v tb=%v, %d workers: element %d is %v, serial %v", m, n, k, ta, tb, p.workers, i, c[i], want[i])
							}
						}
					}
					if !tb && m > gemmSmallM && m <= gemmFusedMaxM {
						// gemmFusedB directly: gemm takes it only where its
						// tiles are enough tasks for the pool.
						c := make([]float32, m*n)
						op := gemmOp{ta: ta, m: m, n: n, k: k, a: a, lda: lda, b: b, ldb: ldb, c: c, ldc: n}
						nc, nt := fusedSplit(n)
						gemmFusedB(newPool(3), op, m*n*k, nc, nt)
						for i := range c {
							if c[i] != want[i] {
								t.Fatalf("%dx%dx%d ta=%v, B packed tile by tile: element %d is %v, serial %v", m, n, k, ta, i, c[i], want[i])
							}
						}
					}
				}
			}
		}
	})
}

func TestExp(t *testing.T) {
	var xs []float32
	for x := -100.0; x <= 100; x += 0.173 {
		xs = append(xs, float32(x))
	}
	xs = append(xs, 0, -0, 1e-8, -1e-8, expMin, expMax, -87, 88.5, float32(math.Inf(-1)), float32(math.Inf(1)), -1e30, 1e30)
	forEachKernel(t, func(t *testing.T) {
		for _, n := range []int{1, 7, 16, 33, len(xs)} {
			got := append([]float32(nil), xs[:n]...)
			sum := kern.expShift(got, 0, 1)
			wantSum := 0.0
			for i, x := range xs[:n] {
				want := math.Exp(float64(x))
				wantSum += float64(got[i])
				switch {
				case x < expMin:
					if got[i] != 0 {
						t.Errorf("exp(%g) = %g, want 0 (flushed)", x, got[i])
					}
				case want > math.MaxFloat32:
					if !math.IsInf(float64(got[i]), 1) {
						t.Errorf("exp(%g) = %g, want +Inf", x, got[i])
					}
				case math.Abs(float64(got[i])-want) > 3e-7*want:
					t.Errorf("exp(%g) = %g, want %g (relative error %.2g)", x, got[i], want, math.Abs(float64(got[i])-want)/want)
				}
			}
			if !math.IsInf(wantSum, 0) && math.Abs(float64(sum)-wantSum) > 1e-6*wantSum {
				t.Errorf("n=%d: sum %g, want %g", n, sum, wantSum)
			}
		}
		// shift and multiplier, as softmax uses them.
		x := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}
		kern.expShift(x, 17, 0.5)
		for i, v := range x {
			if want := math.Exp(0.5 * float64(i+1-17)); math.Abs(float64(v)-want) > 3e-7*want {
				t.Errorf("exp((%d-17)*0.5) = %g, want %g", i+1, v, want)
			}
		}
	})
}

func TestGELU(t *testing.T) {
	var xs []float32
	for x := -12.0; x <= 12; x += 0.0371 {
		xs = append(xs, float32(x))
	}
	xs = append(xs, 0, 1e-6, -1e-6, 30, -30)
	forEachKernel(t, func(t *testing.T) {
		for _, n := range []int{1, 5, 16, 31, len(xs)} {
			out, din := make([]float32, n), make([]float32, n)
			dout := make([]float32, n)
			for i := range dout {
				dout[i] = float32(i%3) - 0.5
			}
			kern.gelu(out, xs[:n])
			kern.geluBackward(din, dout, xs[:n])
			for i, x := range xs[:n] {
				xd := float64(x)
				want := xd * 0.5 * (1 + math.Erf(xd/math.Sqrt2))
				if math.Abs(float64(out[i])-want) > 1e-6*math.Abs(want)+1e-7*math.Abs(xd)+1e-30 {
					t.Errorf("gelu(%g) = %g, want %g", x, out[i], want)
				}
				dw := float64(dout[i]) * (0.5*(1+math.Erf(xd/math.Sqrt2)) + xd*math.Exp(-xd*xd/2)/math.Sqrt(2*math.Pi))
				if math.Abs(float64(din[i])-dw) > 2e-6*math.Abs(dw)+1e-7 {
					t.Errorf("gelu'(%g)*%g = %g, want %g", x, dout[i], din[i], dw)
				}
			}
		}
	})
}

func TestVectorHelpers(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	forEachKernel(t, func(t *testing.T) {
		for _, n := range []int{1, 3, 8, 15, 16, 17, 64, 100} {
			a, b := randSlice(r, n), randSlice(r, n+3)
			want, bound := 0.0, 0.0
			mx := a[0]
			for i := range a {
				want += float64(a[i]) * float64(b[i])
				bound += math.Abs(float64(a[i]) * float64(b[i]))
				mx = max(mx, a[i])
			}
			if got := kern.dot(a, b); math.Abs(float64(got)-want) > 1e-6*bound {
				t.Errorf("n=%d: dot %g, want %g", n, got, want)
			}
			if got := kern.max(a); got != mx {
				t.Errorf("n=%d: max %g, want %g", n, got, mx)
			}
			y := append([]float32(nil), a...)
			kern.axpy(y, 0.5, b)
			for i := range y {
				if w := a[i] + 0.5*b[i]; math.Abs(float64(y[i]-w)) > 1e-6*math.Abs(float64(w))+1e-7 {
					t.Fatalf("n=%d: axpy[%d] = %g, want %g", n, i, y[i], w)
				}
			}
			kern.scale(y, 2)
			for i := range y {
				if w := 2 * (a[i] + 0.5*b[i]); math.Abs(float64(y[i]-w)) > 1e-6*math.Abs(float64(w))+1e-7 {
					t.Fatalf("n=%d: scale[%d] = %g, want %g", n, i, y[i], w)
				}
			}
		}
	})
}

// TestExpRows: each kernel tier's ExpRows is math.Exp within 2⁻²¹ of the
// value (a few float32 roundings), over log-probabilities' range, with
// exp of a masked -1e30 exactly 0.
func TestExpRows(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	x := make([]float32, 5*41)
	for i := range x {
		x[i] = float32(-40 * r.Float64())
	}
	x[3], x[50] = -1e30, 0
	forEachKernel(t, func(t *testing.T) {
		got := append([]float32(nil), x...)
		ExpRows(got, 41)
		for i, v := range x {
			want := math.Exp(float64(v))
			if math.Abs(float64(got[i])-want) > 0x1p-21*want || want == 0 && got[i] != 0 {
				t.Errorf("exp(%g) = %g, want %g", v, got[i], want)
			}
		}
	})
}

func TestLogSoftmaxRows(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	x := randSlice(r, 3*37)
	x[5] = -1e30 // a masked-out entry
	want := make([]float64, len(x))
	for i := range 3 {
		row := x[i*37 : (i+1)*37]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, float64(v))
		}
		s := 0.0
		for _, v := range row {
			s += math.Exp(float64(v) - mx)
		}
		for j, v := range row {
			want[i*37+j] = float64(v) - mx - math.Log(s)
		}
	}
	forEachKernel(t, func(t *testing.T) {
		got := append([]float32(nil), x...)
		LogSoftmaxRows(got, 37)
		for i := range got {
			if math.Abs(float64(got[i])-want[i]) > 1e-6*math.Max(1, math.Abs(want[i])) {
				t.Errorf("entry %d: %g, want %g", i, got[i], want[i])
			}
		}
	})
}

// BenchmarkGemm reports GFLOP/s of the matrix products of an SFT step on
// the bench shape (n = 1,900 tokens, 800 head targets) and on the demo
// recipe's (width 256, FFN 1,024, 2,048 tokens, vocabulary 4,096), each
// in float32 and, where the CPU has AVX512_BF16, with bf16 inputs (the
// products of train sft --matmul bf16; the ratio of the two is the
// product's own bf16 gain, without the rest of a step).
func BenchmarkGemm(b *testing.B) {
	if err := selectKernels(); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	precisions := []string{MatmulFP32}
	if BF16Native() {
		precisions = append(precisions, MatmulBF16)
	}
	const demoT = 2048
	for _, tc := range []struct {
		name    string
		ta, tb  bool
		m, n, k int
	}{
		{"ffn_in fwd", false, false, 1900, 512, 128},
		{"ffn_in dW", true, false, 128, 512, 1900},
		{"ffn_in dX", false, true, 1900, 128, 512},
		{"qkv fwd", false, false, 1900, 128, 128},
		{"lm_head fwd", false, false, 800, 4096, 128},
		{"lm_head dW", true, false, 128, 4096, 800},
		{"lm_head dX", false, true, 800, 128, 4096},
		{"demo ffn_in fwd", false, false, demoT, 1024, 256},
		{"demo ffn_in dW", true, false, 256, 1024, demoT},
		{"demo ffn_in dX", false, true, demoT, 256, 1024},
		{"demo ffn_out fwd", false, false, demoT, 256, 1024},
		{"demo ffn_out dW", true, false, 1024, 256, demoT},
		{"demo qkv fwd", false, false, demoT, 256, 256},
		{"demo lm_head fwd", false, false, 800, 4096, 256},
		{"demo lm_head dW", true, false, 256, 4096, 800},
		{"demo lm_head dX", false, true, 800, 256, 4096},
	} {
		for _, prec := range precisions {
			b.Run(kern.name+"/"+tc.name+"/"+prec, func(b *testing.B) {
				lda, ldb := tc.k, tc.n
				if tc.ta {
					lda = tc.m
				}
				if tc.tb {
					ldb = tc.k
				}
				op := gemmOp{ta: tc.ta, tb: tc.tb, m: tc.m, n: tc.n, k: tc.k, bf16: prec == MatmulBF16,
					a: randSlice(r, tc.m*tc.k), lda: lda, b: randSlice(r, tc.k*tc.n), ldb: ldb,
					c: make([]float32, tc.m*tc.n), ldc: tc.n}
				p := workers()
				gemm(p, op) // warm-up: buffers grow to size
				b.ResetTimer()
				cpu0 := cpuSeconds()
				for range b.N {
					gemm(p, op)
				}
				flops := float64(b.N) * 2 * float64(tc.m*tc.n*tc.k)
				b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(flops/(cpuSeconds()-cpu0)/1e9, "GFLOP/cpu-s")
			})
		}
	}
}

// BenchmarkGemmPeak is the machine's matrix-product peak as this engine
// reaches it: one 2,048 x 2,048 x 2,048 product (C = A·B, row-major,
// 17.2 GFLOP) per iteration, on GOMAXPROCS workers. make bench prints the
// model FLOP utilisation of the SFT and generation benchmarks against it
// (scripts/bench_torch_gemm.py is PyTorch's).
func BenchmarkGemmPeak(b *testing.B) {
	if err := selectKernels(); err != nil {
		b.Fatal(err)
	}
	const n = 2048
	r := rand.New(rand.NewPCG(3, 4))
	op := gemmOp{m: n, n: n, k: n, a: randSlice(r, n*n), lda: n, b: randSlice(r, n*n), ldb: n, c: make([]float32, n*n), ldc: n}
	p := workers()
	gemm(p, op) // warm-up: buffers grow to size
	b.Run("kernel="+kern.name, func(b *testing.B) {
		cpu0 := cpuSeconds()
		for range b.N {
			gemm(p, op)
		}
		flops := float64(b.N) * 2 * n * n * n
		b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		b.ReportMetric(flops/(cpuSeconds()-cpu0)/1e9, "GFLOP/cpu-s")
	})
}

// cpuSeconds is the CPU time this process has used: on a machine shared
// with other work, throughput per CPU-second is steadier than per second.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// BenchmarkElementwise reports ns per element of the exp, GELU and GELU
// gradient kernels on every kernel path, on normally distributed inputs
// (and exp on inputs far below expMin). On AVX-512 they run at about 1-5
// ns; 25-30 ns means a legacy-SSE instruction has crept into a vector loop
// (see zero16 in kernels_simd_amd64.go).
func BenchmarkElementwise(b *testing.B) {
	if err := selectKernels(); err != nil {
		b.Fatal(err)
	}
	saved := kern
	defer func() { kern = saved }()
	r := rand.New(rand.NewPCG(7, 8))
	const n = 1 << 14
	in, out, ones, neg := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range in {
		in[i], ones[i], neg[i] = float32(r.NormFloat64()), 1, -100-float32(i%50)
	}
	for _, k := range availableKernels() {
		kern = k
		for _, tc := range []struct {
			name string
			f    func()
		}{
			{"exp", func() { copy(out, in); kern.expShift(out, 0, 1) }},
			{"exp_below_min", func() { copy(out, neg); kern.expShift(out, 0, 1) }},
			{"gelu", func() { kern.gelu(out, in) }},
			{"gelu_backward", func() { kern.geluBackward(out, ones, in) }},
		} {
			b.Run(k.name+"/"+tc.name, func(b *testing.B) {
				for range b.N {
					tc.f()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
			})
		}
	}
}

// TestGemmBiasStart: a product that starts from a bias (and a residual,
// also in place) gives the bits of filling C first and accumulating, on
// every path a dense layer's product can take: gemv (1 row), the few-row
// tiles of decoding, k = 0, the tiles on the pool and in gemmSerial, and
// the bf16 tiles (both implementations).
func TestGemmBiasStart(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	check := func(t *testing.T, bf16 bool) {
		for _, sz := range [][3]int{{1, 300, 70}, {3, 70, 33}, {8, 40, 9}, {77, 300, 130}, {130, 45, 260}, {20, 33, 0}} {
			for _, mode := range []string{"bias", "bias+res", "in place"} {
				m, n, k := sz[0], sz[1], sz[2]
				a, b, bias, res := randSlice(r, m*k), randSlice(r, k*n), randSlice(r, n), randSlice(r, m*n)
				want := make([]float32, m*n)
				for i := range m {
					for j := range n {
						want[i*n+j] = bias[j]
						if mode != "bias" {
							want[i*n+j] += res[i*n+j]
						}
					}
				}
				gemmSerial(&workspace{}, gemmOp{m: m, n: n, k: k, a: a, lda: k, b: b, ldb: n, c: want, ldc: n, acc: true, bf16: bf16})
				for _, serial := range []bool{false, true} {
					c, rs := make([]float32, m*n), []float32(nil)
					switch mode {
					case "bias+res":
						rs = res
					case "in place":
						copy(c, res)
						rs = c
					}
					op := gemmOp{m: m, n: n, k: k, a: a, lda: k, b: b, ldb: n, c: c, ldc: n, bias: bias, res: rs, bf16: bf16}
					if serial {
						gemmSerial(&workspace{}, op)
					} else {
						gemm(newPool(3), op)
					}
					for i := range c {
						if c[i] != want[i] {
							t.Fatalf("%dx%dx%d %s serial=%v: element %d is %v, want %v", m, n, k, mode, serial, i, c[i], want[i])
						}
					}
				}
			}
		}
	}
	forEachKernel(t, func(t *testing.T) { check(t, false) })
	forEachBF16(t, func(t *testing.T, _ *bf16Kernels) { check(t, true) })
}

// TestLayerNormRows: every kernel's LayerNorm row, forward and backward,
// against the same arithmetic in float64, on rows with and without a
// tail past the vector width; the backward's input gradient also sums to
// zero over the row, as a LayerNorm's must.
func TestLayerNormRows(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	forEachKernel(t, func(t *testing.T) {
		for _, d := range []int{1, 7, 16, 33, 128, 256, 300} {
			x, gain, offset, dOut := randSlice(r, d), randSlice(r, d), randSlice(r, d), randSlice(r, d)
			for j := range x {
				x[j] = 3*x[j] + 1.5 // a mean and a spread away from 0 and 1
			}
			out := make([]float32, d)
			mu, rs := kern.lnForward(out, x, gain, offset)
			var s, vs float64
			for _, v := range x {
				s += float64(v)
			}
			m := s / float64(d)
			for _, v := range x {
				vs += (float64(v) - m) * (float64(v) - m)
			}
			r64 := 1 / math.Sqrt(vs/float64(d)+lnEps)
			if math.Abs(float64(mu)-m) > 1e-5*(1+math.Abs(m)) || math.Abs(float64(rs)-r64) > 1e-5*r64 {
				t.Fatalf("d=%d: mean %g, 1/std %g, want %g, %g", d, mu, rs, m, r64)
			}
			xh := make([]float64, d)
			var m1, m2 float64
			for j, v := range x {
				xh[j] = (float64(v) - m) * r64
				want := xh[j]*float64(gain[j]) + float64(offset[j])
				if math.Abs(float64(out[j])-want) > 1e-5*(1+math.Abs(want)) {
					t.Fatalf("d=%d: out[%d] = %g, want %g", d, j, out[j], want)
				}
				dh := float64(dOut[j]) * float64(gain[j])
				m1 += dh
				m2 += dh * xh[j]
			}
			m1 /= float64(d)
			m2 /= float64(d)
			dx, dg, do := randSlice(r, d), randSlice(r, d), randSlice(r, d)
			dx0, dg0, do0 := append([]float32(nil), dx...), append([]float32(nil), dg...), append([]float32(nil), do...)
			kern.lnBackward(dx, dg, do, dOut, x, gain, mu, rs)
			var sum float64
			for j := range d {
				g := float64(dOut[j])
				wantX := float64(dx0[j]) + r64*(g*float64(gain[j])-m1-xh[j]*m2)
				wantG, wantO := float64(dg0[j])+g*xh[j], float64(do0[j])+g
				for _, c := range [][3]float64{{float64(dx[j]), wantX}, {float64(dg[j]), wantG}, {float64(do[j]), wantO}} {
					if math.Abs(c[0]-c[1]) > 1e-4*(1+math.Abs(c[1])) {
						t.Fatalf("d=%d element %d: backward %g, want %g (dx, dGain, dOffset: %v %v %v)", d, j, c[0], c[1], dx[j], dg[j], do[j])
					}
				}
				sum += float64(dx[j]) - float64(dx0[j])
			}
			if d > 1 && math.Abs(sum) > 1e-4*float64(d) {
				t.Fatalf("d=%d: the input gradient sums to %g, not 0", d, sum)
			}
		}
	})
}

// TestRopeKernels: every kernel's rotation gives ropeGeneric's bits,
// forward and inverse, on lengths with and without a tail past the
// vector width, and the inverse undoes the forward within rounding.
func TestRopeKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	forEachKernel(t, func(t *testing.T) {
		for _, n := range []int{1, 7, 8, 16, 32, 37} {
			a, b, c, s := randSlice(r, n), randSlice(r, n), make([]float32, n), make([]float32, n)
			for j := range n {
				th := r.Float64() * 2 * math.Pi
				c[j], s[j] = float32(math.Cos(th)), float32(math.Sin(th))
			}
			for _, inverse := range []bool{false, true} {
				wa, wb := append([]float32(nil), a...), append([]float32(nil), b...)
				ga, gb := append([]float32(nil), a...), append([]float32(nil), b...)
				ropeGeneric(wa, wb, c, s, inverse)
				kern.rope(ga, gb, c, s, inverse)
				for j := range n {
					if ga[j] != wa[j] || gb[j] != wb[j] {
						t.Fatalf("n=%d inverse=%v: pair %d is (%v, %v), ropeGeneric's (%v, %v)", n, inverse, j, ga[j], gb[j], wa[j], wb[j])
					}
				}
			}
			ga, gb := append([]float32(nil), a...), append([]float32(nil), b...)
			kern.rope(ga, gb, c, s, false)
			kern.rope(ga, gb, c, s, true)
			for j := range n {
				if math.Abs(float64(ga[j]-a[j])) > 1e-6 || math.Abs(float64(gb[j]-b[j])) > 1e-6 {
					t.Fatalf("n=%d: the inverse left pair %d at (%v, %v), started at (%v, %v)", n, j, ga[j], gb[j], a[j], b[j])
				}
			}
		}
	})
}

// TestSoftmaxGradKernels: every kernel's softmax backward row gives
// softmaxGradGeneric's bits, with and without a tail, and leaves d past
// len(p) alone.
func TestSoftmaxGradKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	forEachKernel(t, func(t *testing.T) {
		for _, n := range []int{1, 7, 8, 16, 33, 100} {
			p, d := randSlice(r, n), randSlice(r, n+5)
			want, got := append([]float32(nil), d...), append([]float32(nil), d...)
			softmaxGradGeneric(want, p, 0.37, 0.125)
			kern.softmaxGrad(got, p, 0.37, 0.125)
			for j := range got {
				if got[j] != want[j] {
					t.Fatalf("n=%d: d[%d] = %v, softmaxGradGeneric's %v", n, j, got[j], want[j])
				}
			}
			for j := n; j < n+5; j++ {
				if got[j] != d[j] {
					t.Fatalf("n=%d: d[%d] past p changed", n, j)
				}
			}
		}
	})
}

// TestPackStrips: every kernel's packStrips (the AVX2 one in assembly)
// copies each row's strips where packStripsN does, and writes nothing
// else of dst.
func TestPackStrips(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	forEachKernel(t, func(t *testing.T) {
		nr := kern.nr
		for _, sz := range [][3]int{{1, 1, 0}, {3, 2, 5}, {16, 5, 1}, {37, 9, 3}} {
			rows, strips, pad := sz[0], sz[1], sz[2]
			ld := strips*nr + pad
			stride := rows*nr + pad
			src := randSlice(r, (rows-1)*ld+strips*nr)
			got := randSlice(r, (strips-1)*stride+rows*nr+pad)
			want := append([]float32(nil), got...)
			kern.packStrips(got, stride, src, ld, rows, strips)
			packStripsN(want, stride, src, ld, rows, strips, nr)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("rows %d strips %d: dst[%d] = %g, want %g", rows, strips, i, got[i], want[i])
				}
			}
			for s := range strips {
				for kk := range rows {
					for j := range nr {
						if got[s*stride+kk*nr+j] != src[kk*ld+s*nr+j] {
							t.Fatalf("rows %d strips %d: strip %d row %d col %d not copied", rows, strips, s, kk, j)
						}
					}
				}
			}
		}
	})
}
