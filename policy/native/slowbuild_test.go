package native

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"
)

// TestSlowBuildNamesAMissingSIMDBuild: a binary built without
// GOEXPERIMENT=simd on an AVX2 machine says so and how to build it; one
// running vector kernels, or told to run the portable ones, says nothing.
// (make test builds with simd: the first case runs under a plain `go
// test` on an AVX2 machine.)
func TestSlowBuildNamesAMissingSIMDBuild(t *testing.T) {
	note := SlowBuild()
	avx2 := runtime.GOARCH == "amd64" && cpu.X86.HasAVX2 && cpu.X86.HasFMA
	switch {
	case os.Getenv(KernelEnv) != "":
		if note != "" {
			t.Errorf("%s is set, and SlowBuild says %q", KernelEnv, note)
		}
	case len(simdKernels) == 0 && avx2:
		if !strings.Contains(note, "GOEXPERIMENT=simd") || !strings.Contains(note, "make build") {
			t.Errorf("no vector kernels in this build on an AVX2 CPU, and SlowBuild says %q", note)
		}
	default:
		if note != "" {
			t.Errorf("kernels %s, and SlowBuild says %q", KernelName(), note)
		}
	}
}
