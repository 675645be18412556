package interop

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/mlerl/mlerl/dataset"
	"github.com/mlerl/mlerl/env"
	"github.com/mlerl/mlerl/env/episode"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/policy"
	"github.com/mlerl/mlerl/serve"
)

// TestVerlLoadsExport proves that verl 0.9.1's RLHFDataset (what its
// trainer builds from data.train_files and data.val_files) reads the
// exported training and validation files with the checkpoint's tokenizer
// and chat template, hands every row's prompt, reward model and
// extra_info on unchanged, and measures the prompts as mlerl's stats do:
// at the max_prompt_length mlerl declares it keeps exactly the rows the
// stats do not flag, at the stats' longest prompt it keeps all, one token
// less and it drops some. And that the prompt verl's rollout sends the
// model for each row (its agent loop's Continuous Token builder) is, token
// for token, the prompt mlerl's Hugging Face policy reads for that state
// (policy.EncodePrompt): the export's default prompt form is the
// policy's, so a model verl trains is evaluated by mlerl on what it
// learned.
func TestVerlLoadsExport(t *testing.T) {
	python(t)
	data := demoData(t)
	var lines []string
	for _, file := range []string{dataset.VerlTrainFile, dataset.VerlValFile} {
		ex := exportOf(t, data, "rl_states", file)
		es := ex.Stats
		longest := int(es.PromptTokens.Max)
		var prompts []string
		for i, r := range verlRows(t, ex.Path) {
			if len(r.Prompt) != 2 || r.Prompt[0] != (dataset.ChatMessage{Role: "system", Content: policy.SystemPrompt}) || r.Prompt[1].Role != "user" {
				t.Fatalf("%s row %d: prompt %.200v: want the policy's (verl_prompt: policy, the default): rebuild with this binary", file, i, r.Prompt)
			}
			prompts = append(prompts, r.Prompt[1].Content)
		}
		out := runPy(t, nil, "verl_dataset.py", checkpoint(), ex.Path, fmt.Sprintf("%d,%d,%d", es.MaxPromptLength, longest, longest-1), jsonFile(t, policyPrompts(t, prompts)))
		var got struct {
			Rows    int
			Kept    map[string]int
			Longest int
			Same    int `json:"policy_prompts_equal"`
		}
		if err := json.Unmarshal(lastLine(out), &got); err != nil {
			t.Fatalf("verl_dataset.py printed %q: %v", out, err)
		}
		kept := func(n int) int { return got.Kept[fmt.Sprint(n)] }
		switch {
		case got.Rows != es.Rows:
			t.Errorf("%s: verl read %d rows, mlerl wrote %d", file, got.Rows, es.Rows)
		case got.Longest != longest:
			t.Errorf("%s: verl's longest prompt is %d tokens, mlerl's stats say %d", file, got.Longest, longest)
		case kept(es.MaxPromptLength) != es.Rows-es.OverLimit:
			t.Errorf("%s: at data.max_prompt_length %d verl kept %d rows; mlerl's stats flag %d of %d as longer", file, es.MaxPromptLength, kept(es.MaxPromptLength), es.OverLimit, es.Rows)
		case kept(longest) != es.Rows || kept(longest-1) >= es.Rows:
			t.Errorf("%s: verl kept %d rows at %d and %d at %d, want all and fewer", file, kept(longest), longest, kept(longest-1), longest-1)
		case got.Same != es.Rows:
			t.Errorf("%s: %d of %d rollout prompts equal mlerl's policy prompt", file, got.Same, es.Rows)
		}
		lines = append(lines, fmt.Sprintf("%s %d rows: verl kept %d at the declared %d (mlerl flags %d), all at mlerl's longest %d, %d at %d; rollout prompts = mlerl's policy prompts",
			file, got.Rows, kept(es.MaxPromptLength), es.MaxPromptLength, es.OverLimit, longest, kept(longest-1), longest-1))
	}
	t.Logf("summary: RLHFDataset loaded both files; %s", strings.Join(lines, "; "))
}

// TestVerlRewardThroughServeEnv proves that verl's reward path (the
// reward worker its trainer makes, RewardLoopWorker with the "naive"
// reward manager and reward.custom_reward_function at
// scripts/verl_reward.py) returns, for the expert's actions of chosen
// training and validation rows (tokenized and decoded back by verl) and
// for malformed answers, the reward mlerl's own environment gives for the
// same state and action (env.StepFrom with serve-env's environment
// config, run here without HTTP): through a live `mlerl serve-env` with
// its bearer token over HTTP (training rows, by state_id) and over TLS
// with its CA (validation rows, by snapshot_ref); and that a wrong token
// makes verl's reward path fail instead of scoring.
func TestVerlRewardThroughServeEnv(t *testing.T) {
	python(t)
	data := demoData(t)
	bin := mlerlBin(t)
	ctx := context.Background()
	st, err := store.Open(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	envCfg, stop, err := episode.Setup(ctx, serve.DefaultConfig().Env, llm.Config{}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte(fmt.Sprintf("%x\n", time.Now().UnixNano())), 0o600); err != nil {
		t.Fatal(err)
	}
	malformed := []string{
		"no action here",
		"Reflection: r\nThought: t\nAction: Fly Away\nAction Input: {}",
		"Reflection: r\nThought: t\nAction: Execute Script\nAction Input: {\"script\": \"train.py\"}",
	}
	// The validation file holds held-out tasks' initial states, which no
	// expert visited: they get the training rows' expert actions that do
	// not depend on the task (running or reading train.py).
	var generic []string
	for _, r := range verlRows(t, exportOf(t, data, "rl_states", dataset.VerlTrainFile).Path) {
		a, err := env.Parse(groundTruth(t, r).ExpertAction)
		if err == nil && (a.Name == env.ExecuteScript || a.Name == env.InspectScriptLines) && !slices.ContainsFunc(generic, func(g string) bool {
			b, _ := env.Parse(g)
			return b.Name == a.Name
		}) {
			generic = append(generic, groundTruth(t, r).ExpertAction)
		}
	}
	var summary []string
	for _, c := range []struct {
		name, file string
		tls        bool
		pick       int
	}{
		{"http with token, training rows", dataset.VerlTrainFile, false, 6},
		{"tls with token, validation rows", dataset.VerlValFile, true, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			ex := exportOf(t, data, "rl_states", c.file)
			rows := verlRows(t, ex.Path)
			type item struct {
				Row  int    `json:"row"`
				Text string `json:"text"`
			}
			var spec []item
			if c.tls {
				for i := range min(c.pick, len(rows)) {
					for _, g := range generic {
						spec = append(spec, item{i, g})
					}
				}
			} else {
				for _, i := range pickActions(rows, c.pick) {
					spec = append(spec, item{i, groundTruth(t, rows[i]).ExpertAction})
				}
			}
			if len(spec) == 0 {
				t.Fatalf("%s has no row with an expert action", c.file)
			}
			for _, m := range malformed {
				spec = append(spec, item{spec[0].Row, m})
			}
			// A Qwen3 policy's empty reasoning block before the action.
			spec = append(spec, item{spec[0].Row, "<think>\n\n</think>\n\n" + spec[0].Text})
			url, envs := startServeEnv(t, bin, data, token, c.tls)
			out := runPy(t, append(envs, "MLERL_ENV_URL="+url, "MLERL_SERVE_TOKEN_FILE="+token),
				"verl_reward_check.py", checkpoint(), ex.Path, jsonText(spec))
			var scored []scoredRow
			sc := bufio.NewScanner(bytes.NewReader(out))
			sc.Buffer(nil, 1<<22)
			for sc.Scan() {
				if !bytes.HasPrefix(sc.Bytes(), []byte("{")) {
					continue // a library's line
				}
				var r scoredRow
				if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
					t.Fatalf("verl_reward_check.py printed %q: %v", sc.Bytes(), err)
				}
				scored = append(scored, r)
			}
			if len(scored) != len(spec) {
				t.Fatalf("verl scored %d responses, want %d:\n%s", len(scored), len(spec), out)
			}
			var nonzero, negative int
			for i, s := range scored {
				if s.Solution != spec[i].Text {
					t.Errorf("response %d: verl decoded %q, the response was %q", i, s.Solution, spec[i].Text)
				}
				if (c.file == dataset.VerlTrainFile) != (s.StateID != "") {
					t.Errorf("response %d: extra_info.state_id %q in %s", i, s.StateID, c.file)
				}
				// mlerl's own environment on the same state and action (the
				// adapter's reading of the answer: after a reasoning block).
				r, err := env.StepFrom(ctx, envCfg, st, s.SnapshotRef, strings.TrimPrefix(spec[i].Text, "<think>\n\n</think>\n\n"))
				if err != nil {
					t.Fatal(err)
				}
				// The reward function's float exactly; verl's rm_scores
				// tensor holds it as float32.
				if math.Abs(s.RewardScore-r.Reward.Total) > 1e-12 || s.Score != float64(float32(r.Reward.Total)) {
					t.Errorf("response %d (row %d, %.60q): verl scored %v (rm_scores %v), mlerl's environment %v (%s)", i, s.Index, spec[i].Text, s.RewardScore, s.Score, r.Reward.Total, r.Outcome)
				}
				if s.Score != 0 {
					nonzero++
				}
				if s.Score < 0 {
					negative++
				}
			}
			if negative < len(malformed) {
				t.Errorf("only %d negative scores; the %d malformed answers must be penalised", negative, len(malformed))
			}
			if c.tls {
				summary = append(summary, fmt.Sprintf("%d over TLS (%s, by snapshot_ref)", len(scored), c.file))
				return
			}
			summary = append(summary, fmt.Sprintf("%d over HTTP (%s, by state_id; %d non-zero)", len(scored), c.file, nonzero))
			// A wrong token: verl's reward path raises, it scores nothing.
			bad := filepath.Join(t.TempDir(), "bad-token")
			os.WriteFile(bad, []byte("not-the-token\n"), 0o600)
			_, stderr, err := tryPy(t, append(envs, "MLERL_ENV_URL="+url, "MLERL_SERVE_TOKEN_FILE="+bad, "MLERL_ENV_RETRIES=0"),
				"verl_reward_check.py", checkpoint(), ex.Path, jsonText(spec[:1]))
			if err == nil || !strings.Contains(string(stderr), "HTTP 401") {
				t.Errorf("with a wrong token: %v, want verl's reward path to fail with serve-env's 401:\n%s", err, tail(stderr, 10))
			}
		})
	}
	t.Logf("summary: verl's reward worker scored %s equal to mlerl's environment; a wrong token fails with 401", strings.Join(summary, " and "))
}

// scoredRow is one line of scripts/interop/verl_reward_check.py.
type scoredRow struct {
	Index       int
	StateID     string  `json:"state_id"`
	SnapshotRef string  `json:"snapshot_ref"`
	Solution    string  `json:"solution_str"`
	Score       float64 // verl's rm_scores entry (float32)
	RewardScore float64 `json:"reward_score"` // what the reward function returned
}

// verlRows reads an exported verl file as mlerl wrote it.
func verlRows(t *testing.T, path string) []dataset.VerlRow {
	t.Helper()
	rows, err := parquet.ReadFile[dataset.VerlRow](path)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func groundTruth(t *testing.T, r dataset.VerlRow) dataset.VerlGroundTruth {
	t.Helper()
	var gt dataset.VerlGroundTruth
	if err := json.Unmarshal([]byte(r.RewardModel.GroundTruth), &gt); err != nil {
		t.Fatalf("row %d: ground_truth: %v", r.ExtraInfo.Index, err)
	}
	return gt
}

// pickActions picks up to n rows whose expert actions differ in name,
// edits first (their reward carries a measured improvement, where a
// mistake in the state would show).
func pickActions(rows []dataset.VerlRow, n int) []int {
	var edits, others []int
	seen := map[string]int{}
	for i, r := range rows {
		var gt dataset.VerlGroundTruth
		if json.Unmarshal([]byte(r.RewardModel.GroundTruth), &gt) != nil || gt.ExpertAction == "" {
			continue
		}
		a, err := env.Parse(gt.ExpertAction)
		if err != nil || seen[a.Name] >= 2 {
			continue
		}
		seen[a.Name]++
		if strings.HasPrefix(a.Name, "Edit Script") {
			edits = append(edits, i)
		} else {
			others = append(others, i)
		}
	}
	all := append(edits[:min(len(edits), n/2)], others...)
	return all[:min(len(all), n)]
}

// startServeEnv runs `mlerl serve-env` on the data root with the token
// on a free loopback port (with a fresh certificate and CA when tls),
// waits for /healthz and stops it when the test ends. It returns the
// base URL and the adapter's CA setting.
func startServeEnv(t *testing.T, bin, data, token string, useTLS bool) (string, []string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	args := []string{"serve-env", "--data", data, "--addr", addr, "--token_file", token}
	scheme, client, envs := "http", http.DefaultClient, []string(nil)
	if useTLS {
		cert, key, ca := selfSigned(t)
		args = append(args, "--tls_cert", cert, "--tls_key", key)
		pool := x509.NewCertPool()
		b, _ := os.ReadFile(ca)
		pool.AppendCertsFromPEM(b)
		scheme, envs = "https", []string{"MLERL_ENV_CA_FILE=" + ca}
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	}
	cmd := exec.Command(bin, args...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.Env = append(os.Environ(), "MLERL_DEPS="+filepath.Join(repoRoot(), ".deps"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	url := scheme + "://" + addr
	for deadline := time.Now().Add(60 * time.Second); ; {
		resp, err := client.Get(url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, envs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve-env did not answer /healthz at %s in 60 s: %v\n%s", url, err, tail(log.Bytes(), 20))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// selfSigned writes a CA and a certificate it signed for 127.0.0.1 and
// returns the certificate, key and CA files.
func selfSigned(t *testing.T) (cert, key, ca string) {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mlerl interop CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	caCert, _ := x509.ParseCertificate(caDER)
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("cert.pem", "CERTIFICATE", srvDER), write("key.pem", "EC PRIVATE KEY", keyDER), write("ca.pem", "CERTIFICATE", caDER)
}

// TestVerlTrainerOnCPU runs verl's own trainer (python -m
// verl.trainer.main_ppo) for 2 GRPO steps on the exports with the tiny
// checkpoint, trainer.device=cpu, reward through serve-env. Where verl
// refuses for want of a GPU, as verl 0.9.1 does (its ResourcePoolManager
// asks Ray for trainer.n_gpus_per_node GPUs per node: "Total available
// GPUs 0 is less than total desired GPUs 1"), the test skips quoting
// verl's refusal: it proves the refusal is that one and nothing of
// mlerl's. Where the trainer runs, it must log 2 steps with a reward.
//
// The legacy task runner (trainer.use_v1=false) is used: the default V1
// runner first starts TransferQueue's storage actors, which never came up
// on the 2-core development machine (no error within 8 minutes), before
// reaching the same resource check. No rollout engine runs on CPU either:
// verl 0.9.1 registers vllm, sglang and trtllm rollouts only.
func TestVerlTrainerOnCPU(t *testing.T) {
	python(t)
	data := demoData(t)
	bin := mlerlBin(t)
	train := exportOf(t, data, "rl_states", dataset.VerlTrainFile)
	val := exportOf(t, data, "rl_states", dataset.VerlValFile)
	token := filepath.Join(t.TempDir(), "token")
	os.WriteFile(token, []byte("interop-trainer-token\n"), 0o600)
	url, _ := startServeEnv(t, bin, data, token, false)
	py := python(t)
	cmd := exec.Command(py, "-m", "verl.trainer.main_ppo",
		"trainer.use_v1=false", "algorithm.adv_estimator=grpo",
		"data.train_files="+train.Path, "data.val_files="+val.Path,
		fmt.Sprintf("data.max_prompt_length=%d", int(max(train.Stats.PromptTokens.Max, val.Stats.PromptTokens.Max))),
		"data.max_response_length=64", "data.train_batch_size=2", "data.dataloader_num_workers=0",
		"actor_rollout_ref.model.path="+checkpoint(), "actor_rollout_ref.rollout.n=2",
		"actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
		"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
		"trainer.n_gpus_per_node=1", "trainer.nnodes=1", "trainer.device=cpu", "trainer.logger=console",
		"trainer.total_training_steps=2", "trainer.val_before_train=false", "trainer.save_freq=-1",
		"trainer.default_local_dir="+filepath.Join(t.TempDir(), "ckpt"),
		"reward.custom_reward_function.path="+filepath.Join(repoRoot(), "scripts", "verl_reward.py"),
		"reward.num_workers=1")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "HF_DATASETS_OFFLINE=1", "WANDB_MODE=disabled", "OMP_NUM_THREADS=1",
		"MLERL_ENV_URL="+url, "MLERL_SERVE_TOKEN_FILE="+token, "RAY_DEDUP_LOGS=0")
	// Its own process group: Ray's workers die with it at the end.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(8 * time.Minute):
		err = fmt.Errorf("no end after 8 minutes")
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	const refusal = "Total available GPUs 0 is less than total desired GPUs"
	if err != nil {
		if i := strings.Index(log.String(), refusal); i >= 0 {
			line := log.String()[i:]
			line = line[:strings.IndexByte(line+"\n", '\n')]
			t.Skipf("skipped: verl 0.9.1's trainer needs a GPU: ValueError: %s (verl/single_controller/ray/base.py, ResourcePoolManager with use_gpu=True), and a vllm, sglang or trtllm rollout; see scripts/verl_gpu_check.sh", line)
		}
		t.Fatalf("verl's trainer: %v\n%s", err, tail(log.Bytes(), 40))
	}
	if !strings.Contains(log.String(), "training/global_step:2") {
		t.Fatalf("verl's trainer ended without logging step 2:\n%s", tail(log.Bytes(), 40))
	}
	t.Logf("summary: verl's trainer ran 2 GRPO steps on CPU with serve-env's reward")
}
