package policy

import (
	"os"
	"strings"
	"testing"

	"github.com/gomlx/compute"
)

// TestXLABackendIsLinked: GOMLX_BACKEND=xla:... reaches GoMLX's XLA
// backend, which is linked in (without a PJRT plugin on this machine it
// fails to load one, naming the plugin; it never says the backend is
// unknown). With a plugin, the backend comes up.
func TestXLABackendIsLinked(t *testing.T) {
	t.Setenv(compute.ConfigEnvVar, "xla:cpu")
	b, err := NewBackend()
	if err == nil {
		t.Logf("XLA backend up: %s", b.Description())
		b.Finalize()
		return
	}
	t.Logf("no PJRT plugin here: %v", err)
	for _, bad := range []string{"unknown backend", "not registered", "no backend"} {
		if strings.Contains(strings.ToLower(err.Error()), bad) {
			t.Fatalf("the xla backend is not linked in: %v", err)
		}
	}
}

// TestGPUBackend is the first of scripts/gpu_check.sh's tests
// (MLERL_GPU_CHECK=1): the backend GOMLX_BACKEND names comes up, on a
// CUDA device, so that the agreement tests after it really compare the
// native engine with GoMLX on the GPU (and not on a CPU fallback).
func TestGPUBackend(t *testing.T) {
	if os.Getenv("MLERL_GPU_CHECK") != "1" {
		t.Skip("run by scripts/gpu_check.sh (make gpu-check) on a GPU machine")
	}
	name := os.Getenv(compute.ConfigEnvVar)
	if !strings.HasPrefix(name, "xla:") {
		t.Fatalf("GOMLX_BACKEND=%q, want an XLA CUDA backend (xla:cuda or xla:/path/to/plugin.so)", name)
	}
	b, err := NewBackend()
	if err != nil {
		t.Fatalf("GOMLX_BACKEND=%s: %v", name, err)
	}
	defer b.Finalize()
	if d := b.Description(); !strings.Contains(strings.ToLower(d), "cuda") {
		t.Fatalf("GOMLX_BACKEND=%s gave backend %q, not a CUDA one", name, d)
	}
	t.Logf("GPU backend: %s", b.Description())
}
