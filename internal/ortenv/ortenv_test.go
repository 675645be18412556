package ortenv

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/deps"
)

// TestInit: a missing library is refused with ErrNoRuntime and its path
// (nothing is loaded); the library `make setup` installs loads once, and
// a second Init, with any path, keeps the environment it has.
func TestInit(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libonnxruntime.so.1")
	if err := Init(missing); !errors.Is(err, ErrNoRuntime) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Init(%s): %v, want ErrNoRuntime naming the path", missing, err)
	}
	lib, err := deps.Find("onnxruntime/libonnxruntime.so.1")
	if err != nil {
		t.Skipf("ONNX Runtime library not installed (make setup): %v", err)
	}
	if err := Init(lib); err != nil {
		t.Fatal(err)
	}
	if err := Init(missing); err != nil {
		t.Errorf("Init after the environment is up: %v, want nil (one environment per process)", err)
	}
}
