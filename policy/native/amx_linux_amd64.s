//go:build goexperiment.simd

#include "textflag.h"

// The AMX bf16 micro-kernel (amx_linux_amd64.go). The Go assembler does
// not know AMX, so each instruction is spelled as its VEX bytes, the
// instruction in AT&T syntax beside it (generated with GNU as and checked
// against objdump's disassembly). Tiles: tmm0-tmm3 the four 16 x 16
// float32 blocks of C, tmm4-tmm5 A's rows 0-15 and 16-31 (16 rows of 16
// pairs), tmm6-tmm7 B's columns 0-15 and 16-31 (16 rows of pairs by 16
// columns: the panel layout of bf16.go, which is AMX's own).
//
//   TDPBF16PS tmm_b, tmm_a, tmm_c: C[i][j] += sum over the 16 pairs p of
//   A[i][p].lo*B[p][j].lo + A[i][p].hi*B[p][j].hi, in float32
//
// Go never uses the tile registers: a call configures them (LDTILECFG),
// computes, stores and releases them (TILERELEASE: back to the init
// state, so the thread's context switches stay small). An assembly
// function is never preempted asynchronously, so no other goroutine runs
// on this thread in between.

// func microAMX32x32asm(kp int, a *uint32, ars int, b *uint32, ldb int, c *float32, ldc int, acc bool, cfg *byte)
//
// C[32 x 32] = A·B (+ C when acc) over kp pairs of k, kp a positive
// multiple of 16: A(i, pair q) is the uint32 at a + (i*ars + q)*4, B kp
// rows of 32 pairs with a row stride of ldb uint32s, C rows ldc float32s
// apart; cfg is the 64-byte tile configuration (16 rows of 64 bytes for
// all eight tiles).
TEXT ·microAMX32x32asm(SB), NOSPLIT, $0-72
	MOVQ kp+0(FP), CX
	SHRQ $4, CX          // k steps of 16 pairs
	MOVQ a+8(FP), SI     // A's rows 0-15
	MOVQ ars+16(FP), R8
	SHLQ $2, R8          // A's row stride in bytes
	MOVQ R8, R11
	SHLQ $4, R11
	ADDQ SI, R11         // A's rows 16-31
	MOVQ b+24(FP), DX    // B's columns 0-15
	MOVQ ldb+32(FP), R10
	SHLQ $2, R10         // B's row stride in bytes
	LEAQ 64(DX), BX      // B's columns 16-31
	MOVQ R10, R12
	SHLQ $4, R12         // 16 rows of B: one k step
	MOVQ c+40(FP), DI    // C's rows 0-15
	MOVQ ldc+48(FP), R9
	SHLQ $2, R9          // C's row stride in bytes
	MOVQ R9, R13
	SHLQ $4, R13
	ADDQ DI, R13         // C's rows 16-31
	MOVQ cfg+64(FP), AX
	BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0x00 // ldtilecfg (%rax)
	MOVBLZX acc+56(FP), AX
	TESTQ AX, AX
	JZ    zero

	LEAQ 64(DI), AX
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x04; BYTE $0x0f               // tileloadd (%rdi,%r9,1),%tmm0
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x0c; BYTE $0x08               // tileloadd (%rax,%r9,1),%tmm1
	LEAQ 64(R13), AX
	BYTE $0xc4; BYTE $0x82; BYTE $0x7b; BYTE $0x4b; BYTE $0x54; BYTE $0x0d; BYTE $0x00 // tileloadd 0x0(%r13,%r9,1),%tmm2
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x1c; BYTE $0x08               // tileloadd (%rax,%r9,1),%tmm3
	JMP  loop

zero:
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc0 // tilezero %tmm0
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc8 // tilezero %tmm1
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xd0 // tilezero %tmm2
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xd8 // tilezero %tmm3

loop:
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x24; BYTE $0x06 // tileloadd (%rsi,%r8,1),%tmm4
	BYTE $0xc4; BYTE $0x82; BYTE $0x7b; BYTE $0x4b; BYTE $0x2c; BYTE $0x03 // tileloadd (%r11,%r8,1),%tmm5
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x34; BYTE $0x12 // tileloadd (%rdx,%r10,1),%tmm6
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x3c; BYTE $0x13 // tileloadd (%rbx,%r10,1),%tmm7
	BYTE $0xc4; BYTE $0xe2; BYTE $0x4a; BYTE $0x5c; BYTE $0xc4             // tdpbf16ps %tmm6,%tmm4,%tmm0
	BYTE $0xc4; BYTE $0xe2; BYTE $0x42; BYTE $0x5c; BYTE $0xcc             // tdpbf16ps %tmm7,%tmm4,%tmm1
	BYTE $0xc4; BYTE $0xe2; BYTE $0x4a; BYTE $0x5c; BYTE $0xd5             // tdpbf16ps %tmm6,%tmm5,%tmm2
	BYTE $0xc4; BYTE $0xe2; BYTE $0x42; BYTE $0x5c; BYTE $0xdd             // tdpbf16ps %tmm7,%tmm5,%tmm3
	ADDQ $64, SI
	ADDQ $64, R11
	ADDQ R12, DX
	ADDQ R12, BX
	DECQ CX
	JNZ  loop

	LEAQ 64(DI), AX
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7a; BYTE $0x4b; BYTE $0x04; BYTE $0x0f               // tilestored %tmm0,(%rdi,%r9,1)
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7a; BYTE $0x4b; BYTE $0x0c; BYTE $0x08               // tilestored %tmm1,(%rax,%r9,1)
	LEAQ 64(R13), AX
	BYTE $0xc4; BYTE $0x82; BYTE $0x7a; BYTE $0x4b; BYTE $0x54; BYTE $0x0d; BYTE $0x00 // tilestored %tmm2,0x0(%r13,%r9,1)
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7a; BYTE $0x4b; BYTE $0x1c; BYTE $0x08               // tilestored %tmm3,(%rax,%r9,1)
	BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0xc0                           // tilerelease
	RET

// func amxLoop(n int, cfg *byte, a, b *uint32)
//
// The register-and-L1 peak loop: n iterations of the micro-kernel's step
// (two A tiles, two B tiles from the same 4 KB, four TDPBF16PS), for
// BenchmarkAMXPeak. The tiles start at zero and are released.
TEXT ·amxLoop(SB), NOSPLIT, $0-32
	MOVQ n+0(FP), CX
	MOVQ cfg+8(FP), AX
	MOVQ a+16(FP), SI
	MOVQ b+24(FP), DX
	MOVQ $64, R8
	MOVQ $64, R10
	LEAQ 1024(SI), R11
	LEAQ 1024(DX), BX
	BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0x00 // ldtilecfg (%rax)
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc0 // tilezero %tmm0
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc8 // tilezero %tmm1
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xd0 // tilezero %tmm2
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xd8 // tilezero %tmm3
	TESTQ CX, CX
	JLE   donepeak

looppeak:
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x24; BYTE $0x06 // tileloadd (%rsi,%r8,1),%tmm4
	BYTE $0xc4; BYTE $0x82; BYTE $0x7b; BYTE $0x4b; BYTE $0x2c; BYTE $0x03 // tileloadd (%r11,%r8,1),%tmm5
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x34; BYTE $0x12 // tileloadd (%rdx,%r10,1),%tmm6
	BYTE $0xc4; BYTE $0xa2; BYTE $0x7b; BYTE $0x4b; BYTE $0x3c; BYTE $0x13 // tileloadd (%rbx,%r10,1),%tmm7
	BYTE $0xc4; BYTE $0xe2; BYTE $0x4a; BYTE $0x5c; BYTE $0xc4             // tdpbf16ps %tmm6,%tmm4,%tmm0
	BYTE $0xc4; BYTE $0xe2; BYTE $0x42; BYTE $0x5c; BYTE $0xcc             // tdpbf16ps %tmm7,%tmm4,%tmm1
	BYTE $0xc4; BYTE $0xe2; BYTE $0x4a; BYTE $0x5c; BYTE $0xd5             // tdpbf16ps %tmm6,%tmm5,%tmm2
	BYTE $0xc4; BYTE $0xe2; BYTE $0x42; BYTE $0x5c; BYTE $0xdd             // tdpbf16ps %tmm7,%tmm5,%tmm3
	DECQ CX
	JNZ  looppeak

donepeak:
	BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0xc0 // tilerelease
	RET
