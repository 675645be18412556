package policy

import (
	"os"

	"github.com/gomlx/go-xla/compute/xla"
)

// The XLA backend of GoMLX (PJRT): GOMLX_BACKEND=xla:cuda (or xla:cpu)
// selects it at run time and loads the PJRT plugin then (from
// PJRT_PLUGIN_LIBRARY_PATH or the standard places, e.g. JAX's
// jax-cuda12-pjrt), so the binary builds and runs everywhere without one.
// It never downloads a plugin: set MLERL_XLA_AUTO_INSTALL=1 to let it.
func init() {
	xla.EnableAutoInstall(os.Getenv("MLERL_XLA_AUTO_INSTALL") == "1")
}
