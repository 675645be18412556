//go:build goexperiment.simd

package native

import (
	"os"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// AMX bf16 products (amx_linux_amd64.s): Intel's tile unit (Sapphire
// Rapids onward) multiplies a 16 x 32 bf16 tile by a 32 x 16 one into 16
// x 16 float32 sums in one TDPBF16PS. On those CPUs AVX512_BF16's
// VDPBF16PS runs at half the FMA peak (BenchmarkBF16Peak against
// BenchmarkFMAPeak: 114 against 243 GFLOP per CPU-second on a Xeon family
// 6 model 207), so bf16 products through it are slower than float32 ones;
// the tiles run at several times the FMA peak (BenchmarkAMXPeak), and
// they are what PyTorch's bf16 products use there (oneDNN's brgemm).
//
// The kernel takes bf16.go's operands as they are but for A, which it
// needs row-major (a row's pairs adjacent: kernels.rowA), and computes C
// in 32 x 32 tiles, k in steps of 16 pairs; a last step of fewer pairs
// goes through the AVX512_BF16 micro-kernel. TDPBF16PS sums each pair's
// two exact products into the float32 sum, as VDPBF16PS does, in its own
// order and with denormal results flushed to zero: its sums differ from
// the other kernels' by float32 rounding (TestGemmBF16 bounds every
// kernel by the same tolerance).
//
// Linux gives a process the tiles' 8 KB of register state only when it
// asks (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA); amxKernels asks
// once and uses the tiles only if the kernel then lists the permission.
// MLERL_NATIVE_AMX=0 turns the tiles off (the AVX512_BF16 kernel then
// computes the bf16 products).

//go:noescape
func microAMX32x32asm(kp int, a *uint32, ars int, b *uint32, ldb int, c *float32, ldc int, acc bool, cfg *byte)

//go:noescape
func amxLoop(n int, cfg *byte, a, b *uint32)

// amxConfig is the tile configuration (LDTILECFG's 64 bytes): palette
// 1, every one of the eight tiles 16 rows of 64 bytes.
var amxConfig = func() (c [64]byte) {
	c[0] = 1
	for t := range 8 {
		c[16+2*t] = 64 // bytes per row (little-endian uint16)
		c[48+t] = 16   // rows
	}
	return c
}()

// Linux's arch_prctl codes for the extended register state.
const (
	archGetXCompPerm = 0x1022
	archReqXCompPerm = 0x1023
	xfeatureTileData = 18
)

// amxUnavailable says why the tiles are not used ("" when they are).
var amxUnavailable = "not probed"

// amxKernels returns the AMX bf16 kernels, built on avx (the AVX512_BF16
// ones: conversions, panels and the last k step), or nil with
// amxUnavailable saying why.
func amxKernels(avx *bf16Kernels) *bf16Kernels {
	switch {
	case avx == nil:
		amxUnavailable = "no AVX512_BF16"
		return nil
	case !cpu.X86.HasAMXTile || !cpu.X86.HasAMXBF16:
		amxUnavailable = "no AMX-BF16 on this CPU"
		return nil
	case strings.TrimSpace(os.Getenv("MLERL_NATIVE_AMX")) == "0":
		amxUnavailable = "MLERL_NATIVE_AMX=0"
		return nil
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXCompPerm, xfeatureTileData, 0); e != 0 {
		amxUnavailable = "Linux refused the tiles' state (arch_prctl ARCH_REQ_XCOMP_PERM: " + e.Error() + ")"
		return nil
	}
	var perm uint64
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archGetXCompPerm, uintptr(unsafe.Pointer(&perm)), 0); e != 0 || perm&(1<<xfeatureTileData) == 0 {
		amxUnavailable = "Linux does not list the tiles' state as permitted"
		return nil
	}
	amxUnavailable = ""
	k := *avx
	k.name, k.mr, k.nr, k.rowA = "amx-bf16", 32, 32, true
	k.cvtPanelsA = nil // A is converted into rows (rowA), never into panels
	tail := avx.micro
	k.micro = func(kp int, a []uint32, ars, aks int, b []uint32, ldb int, c []float32, ldc int, acc bool) {
		microAMX32x32(tail, kp, a, ars, aks, b, ldb, c, ldc, acc)
	}
	return &k
}

// microAMX32x32 is the 32 x 32 micro-kernel: whole steps of 16 pairs on
// the tiles, the rest on tail (an 8 x 32 kernel, four times).
func microAMX32x32(tail func(int, []uint32, int, int, []uint32, int, []float32, int, bool), kp int, a []uint32, ars, aks int, b []uint32, ldb int, c []float32, ldc int, acc bool) {
	const mr, nr = 32, 32
	if kp <= 0 || aks != 1 || ars < kp || ldb < nr || ldc < nr || len(a) < (mr-1)*ars+kp || len(b) < (kp-1)*ldb+nr || len(c) < (mr-1)*ldc+nr {
		panic("native: AMX micro-kernel tile out of range")
	}
	full := kp &^ 15
	if full > 0 {
		microAMX32x32asm(full, &a[0], ars, &b[0], ldb, &c[0], ldc, acc, &amxConfig[0])
	}
	if full < kp {
		for r := 0; r < mr; r += 8 {
			tail(kp-full, a[r*ars+full:], ars, 1, b[full*ldb:], ldb, c[r*ldc:], ldc, acc || full > 0)
		}
	}
}

// AMXLoop runs n iterations of the AMX peak loop and returns its FLOPs
// (four 16 x 16 x 32 tile products an iteration, 2 per multiply-add); ok
// is false where the tiles are not used.
func AMXLoop(n int) (flops float64, ok bool) {
	if bf16Fast == nil || !bf16Fast.rowA {
		return 0, false
	}
	var a, b [512]uint32 // two tiles each
	amxLoop(n, &amxConfig[0], &a[0], &b[0])
	return float64(n) * 4 * 16 * 16 * 32 * 2, true
}
