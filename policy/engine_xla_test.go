package policy

import (
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
