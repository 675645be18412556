//go:build goexperiment.simd && amd64

#include "textflag.h"

// GEMM micro-kernels in assembly: C[mr x nr] = A·B (+ C when acc), A(i, k)
// at a + (i*ars + k*aks)*4 bytes, B kc rows of nr floats with a row stride
// of ldb floats, C rows of nr floats with a stride of ldc floats. The sums
// start at zero and C is added last, as in every other micro-kernel of the
// package (a tile's bits do not depend on the path that computed it).
//
// They exist because of one instruction form: archsimd's MulAdd compiles
// to VFMADD213PS, whose result overwrites a multiplicand, so a Go kernel
// copies its B vectors before each FMA and moves its accumulators back at
// every step (about 4 instructions per FMA), and its register allocator
// spills beyond 15 vector registers. Here each FMA is one VFMADD231PS
// into its accumulator, with one broadcast per row of A and step.
//
// Both end with VZEROUPPER (see kernels_simd_amd64.go). The Go wrappers
// check the slices' bounds before calling them.

// func micro8x32asm(kc int, a *float32, ars, aks int, b *float32, ldb int, c *float32, ldc int, acc bool)
//
// AVX-512: 8 rows x 32 columns, 16 accumulators Z0-Z15, B in Z16-Z17,
// broadcasts in Z18-Z25.
TEXT ·micro8x32asm(SB), NOSPLIT, $0-65
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ ars+16(FP), R8
	SHLQ $2, R8
	MOVQ aks+24(FP), R9
	SHLQ $2, R9
	MOVQ b+32(FP), DX
	MOVQ ldb+40(FP), R10
	SHLQ $2, R10
	LEAQ (R8)(R8*2), R12 // 3 rows
	LEAQ (SI)(R8*4), R13 // row 4

	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15

loop512:
	VMOVUPS      (DX), Z16
	VMOVUPS      64(DX), Z17
	VBROADCASTSS (SI), Z18
	VBROADCASTSS (SI)(R8*1), Z19
	VBROADCASTSS (SI)(R8*2), Z20
	VBROADCASTSS (SI)(R12*1), Z21
	VFMADD231PS  Z16, Z18, Z0
	VFMADD231PS  Z17, Z18, Z1
	VFMADD231PS  Z16, Z19, Z2
	VFMADD231PS  Z17, Z19, Z3
	VFMADD231PS  Z16, Z20, Z4
	VFMADD231PS  Z17, Z20, Z5
	VFMADD231PS  Z16, Z21, Z6
	VFMADD231PS  Z17, Z21, Z7
	VBROADCASTSS (R13), Z22
	VBROADCASTSS (R13)(R8*1), Z23
	VBROADCASTSS (R13)(R8*2), Z24
	VBROADCASTSS (R13)(R12*1), Z25
	VFMADD231PS  Z16, Z22, Z8
	VFMADD231PS  Z17, Z22, Z9
	VFMADD231PS  Z16, Z23, Z10
	VFMADD231PS  Z17, Z23, Z11
	VFMADD231PS  Z16, Z24, Z12
	VFMADD231PS  Z17, Z24, Z13
	VFMADD231PS  Z16, Z25, Z14
	VFMADD231PS  Z17, Z25, Z15
	ADDQ         R9, SI
	ADDQ         R9, R13
	ADDQ         R10, DX
	DECQ         CX
	JNZ          loop512

	MOVQ    c+48(FP), DI
	MOVQ    ldc+56(FP), R11
	SHLQ    $2, R11
	MOVBLZX acc+64(FP), AX
	TESTQ   AX, AX
	JZ      store512
	VADDPS  (DI), Z0, Z0
	VADDPS  64(DI), Z1, Z1
	ADDQ    R11, DI
	VADDPS  (DI), Z2, Z2
	VADDPS  64(DI), Z3, Z3
	ADDQ    R11, DI
	VADDPS  (DI), Z4, Z4
	VADDPS  64(DI), Z5, Z5
	ADDQ    R11, DI
	VADDPS  (DI), Z6, Z6
	VADDPS  64(DI), Z7, Z7
	ADDQ    R11, DI
	VADDPS  (DI), Z8, Z8
	VADDPS  64(DI), Z9, Z9
	ADDQ    R11, DI
	VADDPS  (DI), Z10, Z10
	VADDPS  64(DI), Z11, Z11
	ADDQ    R11, DI
	VADDPS  (DI), Z12, Z12
	VADDPS  64(DI), Z13, Z13
	ADDQ    R11, DI
	VADDPS  (DI), Z14, Z14
	VADDPS  64(DI), Z15, Z15
	MOVQ    c+48(FP), DI

store512:
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	ADDQ    R11, DI
	VMOVUPS Z2, (DI)
	VMOVUPS Z3, 64(DI)
	ADDQ    R11, DI
	VMOVUPS Z4, (DI)
	VMOVUPS Z5, 64(DI)
	ADDQ    R11, DI
	VMOVUPS Z6, (DI)
	VMOVUPS Z7, 64(DI)
	ADDQ    R11, DI
	VMOVUPS Z8, (DI)
	VMOVUPS Z9, 64(DI)
	ADDQ    R11, DI
	VMOVUPS Z10, (DI)
	VMOVUPS Z11, 64(DI)
	ADDQ    R11, DI
	VMOVUPS Z12, (DI)
	VMOVUPS Z13, 64(DI)
	ADDQ    R11, DI
	VMOVUPS Z14, (DI)
	VMOVUPS Z15, 64(DI)
	VZEROUPPER
	RET

// func micro6x16asm(kc int, a *float32, ars, aks int, b *float32, ldb int, c *float32, ldc int, acc bool)
//
// AVX2 + FMA: 6 rows x 16 columns, 12 accumulators Y0-Y11, B in Y12-Y13,
// broadcasts alternating in Y14-Y15 (16 registers in all).
TEXT ·micro6x16asm(SB), NOSPLIT, $0-65
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ ars+16(FP), R8
	SHLQ $2, R8
	MOVQ aks+24(FP), R9
	SHLQ $2, R9
	MOVQ b+32(FP), DX
	MOVQ ldb+40(FP), R10
	SHLQ $2, R10
	LEAQ (R8)(R8*2), R12 // 3 rows
	LEAQ (SI)(R12*1), R13 // row 3

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

loop256:
	VMOVUPS      (DX), Y12
	VMOVUPS      32(DX), Y13
	VBROADCASTSS (SI), Y14
	VBROADCASTSS (SI)(R8*1), Y15
	VFMADD231PS  Y12, Y14, Y0
	VFMADD231PS  Y13, Y14, Y1
	VFMADD231PS  Y12, Y15, Y2
	VFMADD231PS  Y13, Y15, Y3
	VBROADCASTSS (SI)(R8*2), Y14
	VBROADCASTSS (R13), Y15
	VFMADD231PS  Y12, Y14, Y4
	VFMADD231PS  Y13, Y14, Y5
	VFMADD231PS  Y12, Y15, Y6
	VFMADD231PS  Y13, Y15, Y7
	VBROADCASTSS (R13)(R8*1), Y14
	VBROADCASTSS (R13)(R8*2), Y15
	VFMADD231PS  Y12, Y14, Y8
	VFMADD231PS  Y13, Y14, Y9
	VFMADD231PS  Y12, Y15, Y10
	VFMADD231PS  Y13, Y15, Y11
	ADDQ         R9, SI
	ADDQ         R9, R13
	ADDQ         R10, DX
	DECQ         CX
	JNZ          loop256

	MOVQ    c+48(FP), DI
	MOVQ    ldc+56(FP), R11
	SHLQ    $2, R11
	MOVBLZX acc+64(FP), AX
	TESTQ   AX, AX
	JZ      store256
	VADDPS  (DI), Y0, Y0
	VADDPS  32(DI), Y1, Y1
	ADDQ    R11, DI
	VADDPS  (DI), Y2, Y2
	VADDPS  32(DI), Y3, Y3
	ADDQ    R11, DI
	VADDPS  (DI), Y4, Y4
	VADDPS  32(DI), Y5, Y5
	ADDQ    R11, DI
	VADDPS  (DI), Y6, Y6
	VADDPS  32(DI), Y7, Y7
	ADDQ    R11, DI
	VADDPS  (DI), Y8, Y8
	VADDPS  32(DI), Y9, Y9
	ADDQ    R11, DI
	VADDPS  (DI), Y10, Y10
	VADDPS  32(DI), Y11, Y11
	MOVQ    c+48(FP), DI

store256:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ    R11, DI
	VMOVUPS Y2, (DI)
	VMOVUPS Y3, 32(DI)
	ADDQ    R11, DI
	VMOVUPS Y4, (DI)
	VMOVUPS Y5, 32(DI)
	ADDQ    R11, DI
	VMOVUPS Y6, (DI)
	VMOVUPS Y7, 32(DI)
	ADDQ    R11, DI
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, 32(DI)
	ADDQ    R11, DI
	VMOVUPS Y10, (DI)
	VMOVUPS Y11, 32(DI)
	VZEROUPPER
	RET

// func micro4x64asm(kc int, a *float32, ars, aks int, b *float32, ldb int, c *float32, ldc int, acc bool)
//
// AVX-512, for products with few rows and B read in place (decoding): 4
// rows x 64 columns, 16 accumulators Z0-Z15, B in Z16-Z19, broadcasts in
// Z20-Z23. Each row of B visited gives 256 contiguous bytes.
TEXT ·micro4x64asm(SB), NOSPLIT, $0-65
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ ars+16(FP), R8
	SHLQ $2, R8
	MOVQ aks+24(FP), R9
	SHLQ $2, R9
	MOVQ b+32(FP), DX
	MOVQ ldb+40(FP), R10
	SHLQ $2, R10
	LEAQ (R8)(R8*2), R12 // 3 rows

	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15

loopw512:
	VMOVUPS      (DX), Z16
	VMOVUPS      64(DX), Z17
	VMOVUPS      128(DX), Z18
	VMOVUPS      192(DX), Z19
	VBROADCASTSS (SI), Z20
	VBROADCASTSS (SI)(R8*1), Z21
	VBROADCASTSS (SI)(R8*2), Z22
	VBROADCASTSS (SI)(R12*1), Z23
	VFMADD231PS  Z16, Z20, Z0
	VFMADD231PS  Z17, Z20, Z1
	VFMADD231PS  Z18, Z20, Z2
	VFMADD231PS  Z19, Z20, Z3
	VFMADD231PS  Z16, Z21, Z4
	VFMADD231PS  Z17, Z21, Z5
	VFMADD231PS  Z18, Z21, Z6
	VFMADD231PS  Z19, Z21, Z7
	VFMADD231PS  Z16, Z22, Z8
	VFMADD231PS  Z17, Z22, Z9
	VFMADD231PS  Z18, Z22, Z10
	VFMADD231PS  Z19, Z22, Z11
	VFMADD231PS  Z16, Z23, Z12
	VFMADD231PS  Z17, Z23, Z13
	VFMADD231PS  Z18, Z23, Z14
	VFMADD231PS  Z19, Z23, Z15
	ADDQ         R9, SI
	ADDQ         R10, DX
	DECQ         CX
	JNZ          loopw512

	MOVQ    c+48(FP), DI
	MOVQ    ldc+56(FP), R11
	SHLQ    $2, R11
	MOVBLZX acc+64(FP), AX
	TESTQ   AX, AX
	JZ      storew512
	VADDPS  (DI), Z0, Z0
	VADDPS  64(DI), Z1, Z1
	VADDPS  128(DI), Z2, Z2
	VADDPS  192(DI), Z3, Z3
	ADDQ    R11, DI
	VADDPS  (DI), Z4, Z4
	VADDPS  64(DI), Z5, Z5
	VADDPS  128(DI), Z6, Z6
	VADDPS  192(DI), Z7, Z7
	ADDQ    R11, DI
	VADDPS  (DI), Z8, Z8
	VADDPS  64(DI), Z9, Z9
	VADDPS  128(DI), Z10, Z10
	VADDPS  192(DI), Z11, Z11
	ADDQ    R11, DI
	VADDPS  (DI), Z12, Z12
	VADDPS  64(DI), Z13, Z13
	VADDPS  128(DI), Z14, Z14
	VADDPS  192(DI), Z15, Z15
	MOVQ    c+48(FP), DI

storew512:
	VMOVUPS Z0, (DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	ADDQ    R11, DI
	VMOVUPS Z4, (DI)
	VMOVUPS Z5, 64(DI)
	VMOVUPS Z6, 128(DI)
	VMOVUPS Z7, 192(DI)
	ADDQ    R11, DI
	VMOVUPS Z8, (DI)
	VMOVUPS Z9, 64(DI)
	VMOVUPS Z10, 128(DI)
	VMOVUPS Z11, 192(DI)
	ADDQ    R11, DI
	VMOVUPS Z12, (DI)
	VMOVUPS Z13, 64(DI)
	VMOVUPS Z14, 128(DI)
	VMOVUPS Z15, 192(DI)
	VZEROUPPER
	RET

// func micro2x32asm(kc int, a *float32, ars, aks int, b *float32, ldb int, c *float32, ldc int, acc bool)
//
// AVX2 + FMA, for products with few rows and B read in place: 2 rows x 32
// columns, 8 accumulators Y0-Y7, B in Y8-Y11, broadcasts in Y12-Y13. Each
// row of B visited gives 128 contiguous bytes.
TEXT ·micro2x32asm(SB), NOSPLIT, $0-65
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ ars+16(FP), R8
	SHLQ $2, R8
	MOVQ aks+24(FP), R9
	SHLQ $2, R9
	MOVQ b+32(FP), DX
	MOVQ ldb+40(FP), R10
	SHLQ $2, R10

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7

loopw256:
	VMOVUPS      (DX), Y8
	VMOVUPS      32(DX), Y9
	VMOVUPS      64(DX), Y10
	VMOVUPS      96(DX), Y11
	VBROADCASTSS (SI), Y12
	VBROADCASTSS (SI)(R8*1), Y13
	VFMADD231PS  Y8, Y12, Y0
	VFMADD231PS  Y9, Y12, Y1
	VFMADD231PS  Y10, Y12, Y2
	VFMADD231PS  Y11, Y12, Y3
	VFMADD231PS  Y8, Y13, Y4
	VFMADD231PS  Y9, Y13, Y5
	VFMADD231PS  Y10, Y13, Y6
	VFMADD231PS  Y11, Y13, Y7
	ADDQ         R9, SI
	ADDQ         R10, DX
	DECQ         CX
	JNZ          loopw256

	MOVQ    c+48(FP), DI
	MOVQ    ldc+56(FP), R11
	SHLQ    $2, R11
	MOVBLZX acc+64(FP), AX
	TESTQ   AX, AX
	JZ      storew256
	VADDPS  (DI), Y0, Y0
	VADDPS  32(DI), Y1, Y1
	VADDPS  64(DI), Y2, Y2
	VADDPS  96(DI), Y3, Y3
	ADDQ    R11, DI
	VADDPS  (DI), Y4, Y4
	VADDPS  32(DI), Y5, Y5
	VADDPS  64(DI), Y6, Y6
	VADDPS  96(DI), Y7, Y7
	MOVQ    c+48(FP), DI

storew256:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    R11, DI
	VMOVUPS Y4, (DI)
	VMOVUPS Y5, 32(DI)
	VMOVUPS Y6, 64(DI)
	VMOVUPS Y7, 96(DI)
	VZEROUPPER
	RET

// func packStrips16asm(dst, src *float32, ld, rows, strips, stride int)
//
// AVX2 packing of B: for each of rows rows of src (ld bytes apart), its
// first strips*16 values go to strips of 16 (stride bytes apart), row kk
// at 64*kk bytes into each. Each row's line 4 rows ahead is prefetched as
// the row is read: B's rows are often pages apart, where the hardware
// prefetchers, which stay within a page, do not follow.
TEXT ·packStrips16asm(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), R8
	MOVQ rows+24(FP), CX
	MOVQ strips+32(FP), DX
	MOVQ stride+40(FP), R9
	LEAQ (R8*4), R10 // 4 rows ahead

packrow:
	MOVQ SI, AX
	MOVQ DI, BX
	MOVQ DX, R11

packstrip:
	PREFETCHT0 (AX)(R10*1)
	VMOVUPS    (AX), Y0
	VMOVUPS    32(AX), Y1
	VMOVUPS    Y0, (BX)
	VMOVUPS    Y1, 32(BX)
	ADDQ       $64, AX
	ADDQ       R9, BX
	DECQ       R11
	JNZ        packstrip

	ADDQ R8, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  packrow
	VZEROUPPER
	RET
