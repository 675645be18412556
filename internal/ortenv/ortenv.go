// Package ortenv holds the process's one ONNX Runtime environment, shared
// by every user of the runtime (the ONNX embedder, internal/embed, and
// the generation peer, policy/onnxpeer): the library is loaded and the
// environment initialized once, under one lock, whoever asks first.
package ortenv

import (
	"errors"
	"fmt"
	"os"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
)

// ErrNoRuntime is wrapped when the ONNX Runtime shared library cannot be
// found or loaded.
var ErrNoRuntime = errors.New("ONNX Runtime library not available")

var mu sync.Mutex

// Init loads the ONNX Runtime library at path and initializes the
// environment, once per process (a process holds one; once it is
// initialized, a later path is ignored). Its errors wrap ErrNoRuntime
// and name the path; callers add how to install a library.
func Init(path string) error {
	mu.Lock()
	defer mu.Unlock()
	if ort.IsInitialized() {
		return nil
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%w: %s is missing", ErrNoRuntime, path)
	}
	ort.SetSharedLibraryPath(path)
	if err := ort.InitializeEnvironment(ort.WithLogLevelError()); err != nil {
		return fmt.Errorf("%w: loading %s: %v", ErrNoRuntime, path, err)
	}
	return nil
}
