//go:build goexperiment.simd && amd64

#include "textflag.h"

// bf16 kernels (AVX512_BF16). The Go assembler does not know the three
// instructions used here, so each is spelled as its EVEX bytes, with the
// instruction in Go's operand order in a comment beside it (generated and
// checked against objdump's disassembly):
//
//   VDPBF16PS z2, z1, z0:  z0.fp32[i] += z1.bf16[2i]*z2.bf16[2i] + z1.bf16[2i+1]*z2.bf16[2i+1]
//   VCVTNEPS2BF16 z, y:    16 float32 to 16 bf16, round to nearest even
//
// Products of two bf16 values are exact in float32; only the adds round.
// All end with VZEROUPPER (see kernels_simd_amd64.go).

// func microBF16x8x32asm(kp int, a *uint32, ars, aks int, b *uint32, ldb int, c *float32, ldc int, acc bool)
//
// C[8 x 32] = A·B (+ C when acc) over kp pairs of k: A(i, pair q) is the
// uint32 at a + (i*ars + q*aks)*4 (two bf16, even k low), B kp rows of 32
// such pairs with a row stride of ldb uint32s. The micro8x32asm register
// plan: 16 accumulators Z0-Z15, B in Z16-Z17, broadcasts in Z18-Z25.
TEXT ·microBF16x8x32asm(SB), NOSPLIT, $0-65
	MOVQ kp+0(FP), CX
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

loopbf16:
	VMOVUPS      (DX), Z16
	VMOVUPS      64(DX), Z17
	VBROADCASTSS (SI), Z18
	VBROADCASTSS (SI)(R8*1), Z19
	VBROADCASTSS (SI)(R8*2), Z20
	VBROADCASTSS (SI)(R12*1), Z21
	BYTE $0x62; BYTE $0xb2; BYTE $0x6e; BYTE $0x40; BYTE $0x52; BYTE $0xc0 // VDPBF16PS Z16, Z18, Z0
	BYTE $0x62; BYTE $0xb2; BYTE $0x6e; BYTE $0x40; BYTE $0x52; BYTE $0xc9 // VDPBF16PS Z17, Z18, Z1
	BYTE $0x62; BYTE $0xb2; BYTE $0x66; BYTE $0x40; BYTE $0x52; BYTE $0xd0 // VDPBF16PS Z16, Z19, Z2
	BYTE $0x62; BYTE $0xb2; BYTE $0x66; BYTE $0x40; BYTE $0x52; BYTE $0xd9 // VDPBF16PS Z17, Z19, Z3
	BYTE $0x62; BYTE $0xb2; BYTE $0x5e; BYTE $0x40; BYTE $0x52; BYTE $0xe0 // VDPBF16PS Z16, Z20, Z4
	BYTE $0x62; BYTE $0xb2; BYTE $0x5e; BYTE $0x40; BYTE $0x52; BYTE $0xe9 // VDPBF16PS Z17, Z20, Z5
	BYTE $0x62; BYTE $0xb2; BYTE $0x56; BYTE $0x40; BYTE $0x52; BYTE $0xf0 // VDPBF16PS Z16, Z21, Z6
	BYTE $0x62; BYTE $0xb2; BYTE $0x56; BYTE $0x40; BYTE $0x52; BYTE $0xf9 // VDPBF16PS Z17, Z21, Z7
	VBROADCASTSS (R13), Z22
	VBROADCASTSS (R13)(R8*1), Z23
	VBROADCASTSS (R13)(R8*2), Z24
	VBROADCASTSS (R13)(R12*1), Z25
	BYTE $0x62; BYTE $0x32; BYTE $0x4e; BYTE $0x40; BYTE $0x52; BYTE $0xc0 // VDPBF16PS Z16, Z22, Z8
	BYTE $0x62; BYTE $0x32; BYTE $0x4e; BYTE $0x40; BYTE $0x52; BYTE $0xc9 // VDPBF16PS Z17, Z22, Z9
	BYTE $0x62; BYTE $0x32; BYTE $0x46; BYTE $0x40; BYTE $0x52; BYTE $0xd0 // VDPBF16PS Z16, Z23, Z10
	BYTE $0x62; BYTE $0x32; BYTE $0x46; BYTE $0x40; BYTE $0x52; BYTE $0xd9 // VDPBF16PS Z17, Z23, Z11
	BYTE $0x62; BYTE $0x32; BYTE $0x3e; BYTE $0x40; BYTE $0x52; BYTE $0xe0 // VDPBF16PS Z16, Z24, Z12
	BYTE $0x62; BYTE $0x32; BYTE $0x3e; BYTE $0x40; BYTE $0x52; BYTE $0xe9 // VDPBF16PS Z17, Z24, Z13
	BYTE $0x62; BYTE $0x32; BYTE $0x36; BYTE $0x40; BYTE $0x52; BYTE $0xf0 // VDPBF16PS Z16, Z25, Z14
	BYTE $0x62; BYTE $0x32; BYTE $0x36; BYTE $0x40; BYTE $0x52; BYTE $0xf9 // VDPBF16PS Z17, Z25, Z15
	ADDQ         R9, SI
	ADDQ         R9, R13
	ADDQ         R10, DX
	DECQ         CX
	JNZ          loopbf16

	MOVQ    c+48(FP), DI
	MOVQ    ldc+56(FP), R11
	SHLQ    $2, R11
	MOVBLZX acc+64(FP), AX
	TESTQ   AX, AX
	JZ      storebf16
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

storebf16:
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

// func cvtBF16asm(n int, src *float32, dst *uint16)
//
// dst[i] = bf16(src[i]) for i < n, n a positive multiple of 16.
TEXT ·cvtBF16asm(SB), NOSPLIT, $0-24
	MOVQ n+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ dst+16(FP), DI
	SHRQ $4, CX

loopcvt:
	VMOVUPS (SI), Z0
	BYTE $0x62; BYTE $0xf2; BYTE $0x7e; BYTE $0x48; BYTE $0x72; BYTE $0xc8 // VCVTNEPS2BF16 Z0, Y1
	VMOVDQU Y1, (DI)
	ADDQ    $64, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     loopcvt
	VZEROUPPER
	RET

// func cvtPairsBF16asm(n int, r0, r1 *float32, dst *uint32)
//
// dst[i] = bf16(r0[i]) | bf16(r1[i])<<16 for i < n, n a positive multiple
// of 16: two rows of k interleaved into the pairs VDPBF16PS reads.
TEXT ·cvtPairsBF16asm(SB), NOSPLIT, $0-32
	MOVQ n+0(FP), CX
	MOVQ r0+8(FP), SI
	MOVQ r1+16(FP), DX
	MOVQ dst+24(FP), DI
	SHRQ $4, CX

looppairs:
	VMOVUPS (SI), Z0
	VMOVUPS (DX), Z2
	BYTE $0x62; BYTE $0xf2; BYTE $0x7e; BYTE $0x48; BYTE $0x72; BYTE $0xc8 // VCVTNEPS2BF16 Z0, Y1
	BYTE $0x62; BYTE $0xf2; BYTE $0x7e; BYTE $0x48; BYTE $0x72; BYTE $0xda // VCVTNEPS2BF16 Z2, Y3
	VPMOVZXWD Y1, Z1
	VPMOVZXWD Y3, Z3
	VPSLLD    $16, Z3, Z3
	VPORD     Z1, Z3, Z4
	VMOVDQU32 Z4, (DI)
	ADDQ      $64, SI
	ADDQ      $64, DX
	ADDQ      $64, DI
	DECQ      CX
	JNZ       looppairs
	VZEROUPPER
	RET

// func dpbf16Loop512(n int, a, b uint32, out *[16]float32)
//
// The bf16 peak: n iterations of 16 independent VDPBF16PS on registers
// (a and b each one pair of bf16, broadcast), then the accumulators'
// sum. 64 FLOPs per instruction (16 lanes, 2 multiply-adds each).
TEXT ·dpbf16Loop512(SB), NOSPLIT, $0-24
	MOVQ         n+0(FP), CX
	VBROADCASTSS a+8(FP), Z16
	VBROADCASTSS b+12(FP), Z17
	MOVQ         out+16(FP), DI
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
	TESTQ CX, CX
	JLE   donedp

loopdp:
	BYTE $0x62; BYTE $0xb2; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xc0 // VDPBF16PS Z16, Z17, Z0
	BYTE $0x62; BYTE $0xb2; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xc8 // VDPBF16PS Z16, Z17, Z1
	BYTE $0x62; BYTE $0xb2; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xd0 // VDPBF16PS Z16, Z17, Z2
	BYTE $0x62; BYTE $0xb2; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xd8 // VDPBF16PS Z16, Z17, Z3
	BYTE $0x62; BYTE $0xb2; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xe0 // VDPBF16PS Z16, Z17, Z4
	BYTE $0x62; BYTE $0xb2; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xe8 // VDPBF16PS Z16, Z17, Z5
	BYTE $0x62; BYTE $0xb2; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xf0 // VDPBF16PS Z16, Z17, Z6
	BYTE $0x62; BYTE $0xb2; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xf8 // VDPBF16PS Z16, Z17, Z7
	BYTE $0x62; BYTE $0x32; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xc0 // VDPBF16PS Z16, Z17, Z8
	BYTE $0x62; BYTE $0x32; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xc8 // VDPBF16PS Z16, Z17, Z9
	BYTE $0x62; BYTE $0x32; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xd0 // VDPBF16PS Z16, Z17, Z10
	BYTE $0x62; BYTE $0x32; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xd8 // VDPBF16PS Z16, Z17, Z11
	BYTE $0x62; BYTE $0x32; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xe0 // VDPBF16PS Z16, Z17, Z12
	BYTE $0x62; BYTE $0x32; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xe8 // VDPBF16PS Z16, Z17, Z13
	BYTE $0x62; BYTE $0x32; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xf0 // VDPBF16PS Z16, Z17, Z14
	BYTE $0x62; BYTE $0x32; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xf8 // VDPBF16PS Z16, Z17, Z15
	DECQ CX
	JNZ  loopdp

donedp:
	VADDPS  Z1, Z0, Z0
	VADDPS  Z3, Z2, Z2
	VADDPS  Z5, Z4, Z4
	VADDPS  Z7, Z6, Z6
	VADDPS  Z9, Z8, Z8
	VADDPS  Z11, Z10, Z10
	VADDPS  Z13, Z12, Z12
	VADDPS  Z15, Z14, Z14
	VADDPS  Z2, Z0, Z0
	VADDPS  Z6, Z4, Z4
	VADDPS  Z10, Z8, Z8
	VADDPS  Z14, Z12, Z12
	VADDPS  Z4, Z0, Z0
	VADDPS  Z12, Z8, Z8
	VADDPS  Z8, Z0, Z0
	VMOVUPS Z0, (DI)
	VZEROUPPER
	RET

// func cvtPanelsBF16asm(panels int, r0, r1 *float32, dst *uint32, stride int)
//
// cvtPairsBF16asm over panels of 32 columns: panel p's 32 pairs from
// columns [32p, 32p+32) of r0 and r1 go to dst + p*stride uint32s (one
// k pair's row of each packed B panel).
TEXT ·cvtPanelsBF16asm(SB), NOSPLIT, $0-40
	MOVQ panels+0(FP), CX
	MOVQ r0+8(FP), SI
	MOVQ r1+16(FP), DX
	MOVQ dst+24(FP), DI
	MOVQ stride+32(FP), R8
	SHLQ $2, R8

looppanels:
	VMOVUPS (SI), Z0
	VMOVUPS (DX), Z2
	VMOVUPS 64(SI), Z5
	VMOVUPS 64(DX), Z7
	BYTE $0x62; BYTE $0xf2; BYTE $0x7e; BYTE $0x48; BYTE $0x72; BYTE $0xc8 // VCVTNEPS2BF16 Z0, Y1
	BYTE $0x62; BYTE $0xf2; BYTE $0x7e; BYTE $0x48; BYTE $0x72; BYTE $0xda // VCVTNEPS2BF16 Z2, Y3
	BYTE $0x62; BYTE $0xf2; BYTE $0x7e; BYTE $0x48; BYTE $0x72; BYTE $0xf5 // VCVTNEPS2BF16 Z5, Y6
	BYTE $0x62; BYTE $0x72; BYTE $0x7e; BYTE $0x48; BYTE $0x72; BYTE $0xc7 // VCVTNEPS2BF16 Z7, Y8
	VPMOVZXWD Y1, Z1
	VPMOVZXWD Y3, Z3
	VPMOVZXWD Y6, Z6
	VPMOVZXWD Y8, Z8
	VPSLLD    $16, Z3, Z3
	VPSLLD    $16, Z8, Z8
	VPORD     Z1, Z3, Z4
	VPORD     Z6, Z8, Z9
	VMOVDQU32 Z4, (DI)
	VMOVDQU32 Z9, 64(DI)
	ADDQ      $128, SI
	ADDQ      $128, DX
	ADDQ      R8, DI
	DECQ      CX
	JNZ       looppanels
	VZEROUPPER
	RET

// func cvtPanels8BF16asm(qn int, src *float32, lda int, dst *uint32, stride int)
//
// For q < qn: 16 columns of src's rows 2q and 2q+1 (row stride lda
// floats) as 16 pairs, the first 8 to dst + q*8, the others to dst +
// stride + q*8 (uint32s): two panels of the micro-kernel's A, each
// written in one run.
TEXT ·cvtPanels8BF16asm(SB), NOSPLIT, $0-40
	MOVQ qn+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ lda+16(FP), R9
	SHLQ $2, R9
	MOVQ dst+24(FP), DI
	MOVQ stride+32(FP), R8
	SHLQ $2, R8

looppanels8:
	VMOVUPS (SI), Z0
	VMOVUPS (SI)(R9*1), Z2
	BYTE $0x62; BYTE $0xf2; BYTE $0x7e; BYTE $0x48; BYTE $0x72; BYTE $0xc8 // VCVTNEPS2BF16 Z0, Y1
	BYTE $0x62; BYTE $0xf2; BYTE $0x7e; BYTE $0x48; BYTE $0x72; BYTE $0xda // VCVTNEPS2BF16 Z2, Y3
	VPMOVZXWD     Y1, Z1
	VPMOVZXWD     Y3, Z3
	VPSLLD        $16, Z3, Z3
	VPORD         Z1, Z3, Z4
	VEXTRACTI32X8 $1, Z4, Y5
	VMOVDQU       Y4, (DI)
	VMOVDQU       Y5, (DI)(R8*1)
	LEAQ          (SI)(R9*2), SI
	ADDQ          $32, DI
	DECQ          CX
	JNZ           looppanels8
	VZEROUPPER
	RET

// func cpuidVendor(out *[12]byte)
//
// The CPU's vendor string (CPUID leaf 0: EBX, EDX, ECX), for BF16Faster.
TEXT ·cpuidVendor(SB), NOSPLIT, $0-8
	MOVQ out+0(FP), DI
	XORL AX, AX
	XORL CX, CX
	CPUID
	MOVL BX, 0(DI)
	MOVL DX, 4(DI)
	MOVL CX, 8(DI)
	RET
