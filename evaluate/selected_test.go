package evaluate

import (
	"context"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/internal/store"
)

// tempStore is a local store in a test's temporary folder.
func tempStore(t *testing.T) store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// selectedSFT names the SFT weights only when the checkpoint evaluate read
// is the one selection.json chose and that one is update 0.
func TestSelectedSFT(t *testing.T) {
	ctx := context.Background()
	st := tempStore(t)
	const dir = "checkpoints/ppo"
	write := func(body string) {
		if err := store.WriteAll(ctx, st, dir+"/selection.json", []byte(body), store.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	at := func(step string) string { return st.URI(dir+"/"+step) + " (selected)" }
	if got, err := selectedSFT(ctx, st, dir, at("step-000000000")); err != nil || got != "" {
		t.Errorf("no selection.json: got %q, %v; want nothing", got, err)
	}
	write(`{"selected_update": 0, "selected": "step-000000000", "reason": "no PPO point beats the SFT point"}`)
	for _, tc := range []struct{ name, source, want string }{
		{"update 0, selected", at("step-000000000"), "no PPO point beats the SFT point"},
		{"the last checkpoint on request", st.URI(dir + "/step-000000000"), ""},
		{"another checkpoint", at("step-000000020"), ""},
	} {
		if got, err := selectedSFT(ctx, st, dir, tc.source); err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	write(`{"selected_update": 20, "selected": "step-000000020", "reason": "update 20 beats the SFT point"}`)
	if got, err := selectedSFT(ctx, st, dir, at("step-000000020")); err != nil || got != "" {
		t.Errorf("update 20: got %q, %v; want nothing", got, err)
	}
	write(`{"selected_update": "zero"`)
	if _, err := selectedSFT(ctx, st, dir, at("step-000000000")); err == nil || !strings.Contains(err.Error(), "selection.json") {
		t.Errorf("a damaged selection.json: got %v, want an error naming it", err)
	}
}
