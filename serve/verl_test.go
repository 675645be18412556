package serve

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mlerl/mlerl/env"
)

// pyScore calls scripts/verl_reward.py's compute_score as verl would, in
// /usr/bin/python3 with only the standard library, and returns its output.
func pyScore(t *testing.T, url, action, groundTruth, extraInfo string, env ...string) (string, error) {
	t.Helper()
	code := `import json, os, verl_reward
extra = json.loads(os.environ["T_EXTRA"]) if os.environ["T_EXTRA"] else None
print(repr(verl_reward.compute_score("mlerl", os.environ["T_ACTION"], os.environ["T_GT"], extra)))`
	cmd := exec.Command("/usr/bin/python3", "-c", code)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(repoRoot(), "scripts"), "MLERL_ENV_URL="+url, "MLERL_ENV_RETRIES=1",
		"T_ACTION="+action, "T_GT="+groundTruth, "T_EXTRA="+extraInfo)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func TestVerlAdapter(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	cfg := DefaultConfig()
	cfg.Data = fixture(t)
	s, err := New(context.Background(), cfg, slogDiscard())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Serve(ctx, ln)
	url := "http://" + ln.Addr().String()

	// The ground truth and extra_info as the verl export writes them.
	gt, _ := json.Marshal(map[string]any{"task_id": state1.TaskID, "snapshot_ref": state1.SnapshotRef, "metric": state1.Metric})
	extra := `{"state_id": "` + state1.StateID + `", "task_id": "` + state1.TaskID + `", "index": 1}`
	action := act(env.ExecuteScript, "train.py")
	var direct StepResponse
	if code := post(t, url, StepRequest{StateID: state1.StateID, Action: action}, &direct); code != 200 {
		t.Fatalf("direct request: %d", code)
	}

	cases := []struct {
		name, action, gt, extra string
		want                    float64
		wantErr                 string
	}{
		{name: "state id and snapshot", action: action, gt: string(gt), extra: extra, want: direct.Reward},
		{name: "snapshot only", action: action, gt: string(gt), want: direct.Reward},
		{name: "malformed answer", action: "no action here", gt: string(gt), extra: extra, want: -1},
		// What a Qwen3 policy trained with thinking on (LLaMA-Factory's
		// default for its qwen3 template) answers: verl decodes the empty
		// block too (<think> is no special token), and the action after
		// it is the one scored.
		{name: "empty think block first", action: "<think>\n\n</think>\n\n" + action, gt: string(gt), extra: extra, want: direct.Reward},
		// A template that opens the block in the generation prompt.
		{name: "reasoning closed in the answer", action: "The script has not run yet.\n</think>\n\n" + action, gt: string(gt), extra: extra, want: direct.Reward},
		{name: "reasoning never closed", action: "<think>\nrun it first\n" + action, gt: string(gt), extra: extra, want: -1},
		// A </think> after the Reflection field is the answer's own text:
		// cutting there would lose the fields.
		{name: "think inside the fields", action: strings.Replace(action, "Thought: t", "Thought: <think>x</think> t", 1), gt: string(gt), extra: extra, want: direct.Reward},
		{name: "unknown state", action: action, gt: "", extra: `{"state_id": "nope"}`, wantErr: `HTTP 404: unknown state_id "nope"`},
		{name: "ground truth not JSON", action: action, gt: "42", extra: "", wantErr: "no state"},
		{name: "no state", action: action, gt: "", extra: "", wantErr: "no state"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := pyScore(t, url, c.action, c.gt, c.extra)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(out, "EnvServerError") || !strings.Contains(out, c.wantErr) {
					t.Fatalf("got %v, output %q; want EnvServerError with %q", err, out, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("compute_score: %v\n%s", err, out)
			}
			got, perr := strconv.ParseFloat(out, 64)
			if perr != nil {
				t.Fatalf("compute_score printed %q, want a float", out)
			}
			if c.want == -1 { // a format error: the env's penalty, whatever its size
				if got >= 0 {
					t.Fatalf("got %v for a malformed answer, want a negative reward", got)
				}
				return
			}
			if diff(got, c.want) > 1e-9 {
				t.Fatalf("got %v want %v (the server's reward for the same state and action)", got, c.want)
			}
		})
	}

	// An unreachable server is an error naming MLERL_ENV_URL, after retries.
	cancel()
	out, err := pyScore(t, "http://127.0.0.1:1", action, string(gt), extra)
	if err == nil || !strings.Contains(out, "MLERL_ENV_URL") {
		t.Fatalf("unreachable server: got %v %q, want an EnvServerError naming MLERL_ENV_URL", err, out)
	}
}
