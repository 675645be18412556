// Package k8s holds the Kubernetes manifests of scripts/k8s; its test
// checks them against the binary: every `mlerl ...` command they run
// parses with the ConfigMap's config files (no unknown keys or flags), and
// the sharding fields agree with what internal/shard reads.
package k8s

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/mlerl/mlerl/internal/shard"
)

type obj = map[string]any

func dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// get walks a path of map keys.
func get(o any, path ...string) any {
	for _, p := range path {
		m, ok := o.(obj)
		if !ok {
			return nil
		}
		o = m[p]
	}
	return o
}

func str(o any, path ...string) string { s, _ := get(o, path...).(string); return s }
func num(o any, path ...string) int    { n, _ := get(o, path...).(int); return n }
func list(o any, path ...string) []any { l, _ := get(o, path...).([]any); return l }

// loadManifests parses every YAML document of scripts/k8s.
func loadManifests(t *testing.T) map[string][]obj {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir(), "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no manifests in scripts/k8s")
	}
	out := map[string][]obj{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var d obj
			if err := dec.Decode(&d); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", filepath.Base(f), err)
			}
			if d == nil {
				continue
			}
			if str(d, "apiVersion") == "" || str(d, "kind") == "" || str(d, "metadata", "name") == "" {
				t.Fatalf("%s: a document without apiVersion, kind or metadata.name", filepath.Base(f))
			}
			d["_file"] = filepath.Base(f)
			out[str(d, "kind")] = append(out[str(d, "kind")], d)
		}
	}
	return out
}

// workload is one pod template with the Job spec around it (nil for a
// Deployment).
type workload struct {
	name string
	job  obj
	pod  obj
}

func workloads(m map[string][]obj) []workload {
	var out []workload
	for _, d := range m["Job"] {
		out = append(out, workload{name: "Job/" + str(d, "metadata", "name"), job: get(d, "spec").(obj), pod: get(d, "spec", "template", "spec").(obj)})
	}
	for _, d := range m["CronJob"] {
		out = append(out, workload{name: "CronJob/" + str(d, "metadata", "name"), job: get(d, "spec", "jobTemplate", "spec").(obj), pod: get(d, "spec", "jobTemplate", "spec", "template", "spec").(obj)})
	}
	for _, d := range m["Deployment"] {
		out = append(out, workload{name: "Deployment/" + str(d, "metadata", "name"), pod: get(d, "spec", "template", "spec").(obj)})
	}
	return out
}

var mlerlCall = regexp.MustCompile(`(?m)(?:^|[;&|]\s*|\bthen\s+|\bdo\s+|\buntil\s+)mlerl\s+([^\n;&|]+)`)

// invocations returns the argument lists of every mlerl command a
// container runs, directly or in a shell script.
func invocations(c obj) [][]string {
	var argv []string
	for _, a := range append(list(c, "command"), list(c, "args")...) {
		argv = append(argv, fmt.Sprint(a))
	}
	if len(argv) > 0 && argv[0] == "mlerl" {
		return [][]string{argv[1:]}
	}
	var out [][]string
	if len(argv) >= 3 && strings.HasSuffix(argv[0], "sh") {
		for _, m := range mlerlCall.FindAllStringSubmatch(argv[len(argv)-1], -1) {
			out = append(out, strings.Fields(m[1]))
		}
	}
	return out
}

var binary string

// buildBinary builds bin/mlerl once into a temporary folder.
func buildBinary(t *testing.T) string {
	t.Helper()
	if binary != "" {
		return binary
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain to build mlerl")
	}
	out := filepath.Join(t.TempDir(), "mlerl")
	cmd := exec.Command(goBin, "build", "-o", out, "./cmd/mlerl")
	cmd.Dir = filepath.Join(dir(), "..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/mlerl: %v\n%s", err, b)
	}
	binary = out
	return out
}

func TestManifests(t *testing.T) {
	m := loadManifests(t)
	bin := buildBinary(t)

	// The ConfigMap and service account the pods name.
	if len(m["ConfigMap"]) != 1 {
		t.Fatalf("got %d ConfigMaps, want 1", len(m["ConfigMap"]))
	}
	cm := m["ConfigMap"][0]
	cmName := str(cm, "metadata", "name")
	cmData := get(cm, "data").(obj)
	accounts := map[string]bool{}
	for _, sa := range m["ServiceAccount"] {
		accounts[str(sa, "metadata", "name")] = true
		if str(sa, "metadata", "annotations", "iam.gke.io/gcp-service-account") == "" {
			t.Errorf("ServiceAccount %s: no workload identity annotation (iam.gke.io/gcp-service-account)", str(sa, "metadata", "name"))
		}
	}
	confDir := t.TempDir()
	usedKeys := map[string]bool{}
	dataRoots := map[string]bool{}
	rolloutKeys := map[string][]string{} // "rollout" / "commit" -> config keys used
	indexedRollouts := 0

	for _, w := range workloads(m) {
		t.Run(w.name, func(t *testing.T) {
			if sa := str(w.pod, "serviceAccountName"); !accounts[sa] {
				t.Errorf("serviceAccountName %q is not a ServiceAccount of the manifests", sa)
			}
			// Volumes from the ConfigMap, by name.
			cmVolumes := map[string]bool{}
			for _, v := range list(w.pod, "volumes") {
				if n := str(v, "configMap", "name"); n != "" {
					if n != cmName {
						t.Errorf("volume %s mounts ConfigMap %q, want %q", str(v, "name"), n, cmName)
					}
					cmVolumes[str(v, "name")] = true
				}
			}
			indexed := w.job != nil && str(w.job, "completionMode") == "Indexed"
			completions := 1
			if indexed {
				completions = num(w.job, "completions")
				if completions < 1 {
					t.Fatalf("Indexed Job without completions")
				}
				if p := num(w.job, "parallelism"); p < 1 || p > completions {
					t.Errorf("parallelism %d, want 1..completions (%d)", p, completions)
				}
				if str(w.job, "podReplacementPolicy") != "Failed" {
					t.Errorf("podReplacementPolicy %q, want Failed: a replacement pod overlapping a terminating one of the same index would write the same part names", str(w.job, "podReplacementPolicy"))
				}
				if get(w.job, "backoffLimitPerIndex") != nil && str(w.pod, "restartPolicy") != "Never" {
					t.Errorf("backoffLimitPerIndex needs restartPolicy Never, got %q", str(w.pod, "restartPolicy"))
				}
			}
			for _, c := range list(w.pod, "containers") {
				env := map[string]string{}
				for _, e := range list(c, "env") {
					name := str(e, "name")
					env[name] = fmt.Sprint(get(e, "value"))
					if name == shard.EnvIndex {
						t.Errorf("the container sets %s itself; Kubernetes sets it in Indexed Jobs", name)
					}
					if strings.HasPrefix(name, "MLERL_") && name != shard.EnvCount {
						t.Errorf("env %s is not read by mlerl (known: %s)", name, shard.EnvCount)
					}
				}
				if indexed {
					if env[shard.EnvCount] != strconv.Itoa(completions) {
						t.Errorf("%s=%q, want the Job's completions %d", shard.EnvCount, env[shard.EnvCount], completions)
					}
					// The last index: what internal/shard makes of it.
					env[shard.EnvIndex] = strconv.Itoa(completions - 1)
				} else if _, ok := env[shard.EnvCount]; ok {
					t.Errorf("%s set outside an Indexed Job", shard.EnvCount)
				}
				mounts := map[string]string{} // mount path -> volume
				for _, vm := range list(c, "volumeMounts") {
					mounts[str(vm, "mountPath")] = str(vm, "name")
				}
				calls := invocations(c.(obj))
				if len(calls) == 0 {
					t.Fatalf("container %s runs no mlerl command", str(c, "name"))
				}
				for _, args := range calls {
					cfgAt := slices.Index(args, "--config")
					if cfgAt < 0 || cfgAt+1 >= len(args) {
						t.Errorf("mlerl %s: no --config", strings.Join(args, " "))
						continue
					}
					path := args[cfgAt+1]
					vol, key := mounts[filepath.Dir(path)], filepath.Base(path)
					if !cmVolumes[vol] {
						t.Errorf("mlerl %s: %s is not in a mounted ConfigMap volume", strings.Join(args, " "), path)
						continue
					}
					text, ok := cmData[key].(string)
					if !ok {
						t.Errorf("mlerl %s: ConfigMap %s has no key %s", strings.Join(args, " "), cmName, key)
						continue
					}
					usedKeys[key] = true
					local := filepath.Join(confDir, key)
					os.WriteFile(local, []byte(text), 0o644)
					run := slices.Clone(args)
					run[cfgAt+1] = local
					got := printConfig(t, bin, run, env)
					if got == nil {
						continue
					}
					dataRoots[str(got, "data")] = true
					stage := strings.Join(args[:cfgAt], " ")
					switch stage {
					case "rollout":
						rolloutKeys["rollout"] = append(rolloutKeys["rollout"], key)
						want := ""
						if indexed {
							want = fmt.Sprintf("%d/%d", completions-1, completions)
							indexedRollouts++
						}
						if s := str(got, "shard"); s != want {
							t.Errorf("mlerl rollout resolves shard %q, want %q", s, want)
						}
					case "rollout commit":
						rolloutKeys["commit"] = append(rolloutKeys["commit"], key)
					case "serve-env":
						checkServe(t, w, c, got)
						checkServeToken(t, m, w, c, got)
					}
				}
			}
		})
	}
	for key := range cmData {
		if !usedKeys[key] {
			t.Errorf("ConfigMap key %s is used by no command", key)
		}
	}
	if len(dataRoots) != 1 {
		t.Errorf("the stages use %d data roots %v, want one", len(dataRoots), dataRoots)
	}
	if indexedRollouts == 0 {
		t.Error("no rollout runs as an Indexed Job")
	}
	for _, k := range append(rolloutKeys["rollout"], rolloutKeys["commit"]...) {
		if k != rolloutKeys["rollout"][0] {
			t.Errorf("rollout shards and commit read %v: they must share one config (its run key names the pending version)", rolloutKeys)
			break
		}
	}
	if len(rolloutKeys["commit"]) == 0 {
		t.Error("no rollout commit step")
	}
}

// printConfig runs `mlerl <args> --print-config` with only env's sharding
// variables and returns the resolved config, or nil after reporting.
func printConfig(t *testing.T, bin string, args []string, env map[string]string) obj {
	t.Helper()
	cmd := exec.Command(bin, append(args, "--print-config")...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, shard.EnvIndex+"=") && !strings.HasPrefix(kv, shard.EnvCount+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Errorf("mlerl %s --print-config: %v\n%s", strings.Join(args, " "), err, stderr.String())
		return nil
	}
	var got obj
	if err := yaml.Unmarshal(out, &got); err != nil {
		t.Errorf("mlerl %s --print-config printed no YAML: %v", strings.Join(args, " "), err)
		return nil
	}
	return got
}

// checkServe checks the serve-env Deployment against its resolved config:
// the port it listens on, the probes' paths, and a grace period that
// covers the drain.
func checkServe(t *testing.T, w workload, c any, got obj) {
	_, port, _ := strings.Cut(str(got, "addr"), ":")
	var ports []string
	for _, p := range list(c, "ports") {
		ports = append(ports, strconv.Itoa(num(p, "containerPort")))
	}
	if !slices.Contains(ports, port) {
		t.Errorf("serve-env listens on port %s, the container exposes %v", port, ports)
	}
	// /readyz needs the token: the probe is the adapter's, reading the
	// mounted token file.
	probe := strings.Join(strings.Fields(fmt.Sprint(list(c, "readinessProbe", "exec", "command"))), " ")
	if !strings.Contains(probe, "verl_reward.py ready") || !strings.Contains(probe, "MLERL_SERVE_TOKEN_FILE="+str(got, "token_file")) {
		t.Errorf("readinessProbe %q: want scripts/verl_reward.py ready with MLERL_SERVE_TOKEN_FILE=%s (token_file)", probe, str(got, "token_file"))
	}
	if p := str(c, "livenessProbe", "httpGet", "path"); p != "/healthz" {
		t.Errorf("livenessProbe path %q, want /healthz", p)
	}
	drain, err := time.ParseDuration(str(got, "shutdown_timeout"))
	if err != nil {
		t.Errorf("shutdown_timeout %q: %v", str(got, "shutdown_timeout"), err)
	}
	if grace := time.Duration(num(w.pod, "terminationGracePeriodSeconds")) * time.Second; grace <= drain {
		t.Errorf("terminationGracePeriodSeconds %v does not exceed shutdown_timeout %v: Kubernetes would kill requests mid-drain", grace, drain)
	}
}

// The image puts the binary on PATH as mlerl and the suite where the
// ConfigMap's ingest config looks for it.
func TestContainerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(dir(), "..", "Containerfile"))
	if err != nil {
		t.Fatal(err)
	}
	m := loadManifests(t)
	var cfg obj
	yaml.Unmarshal([]byte(str(m["ConfigMap"][0], "data", "ingest-tasks.yaml")), &cfg)
	for _, want := range []string{"go build", "./cmd/mlerl", "/usr/local/bin/mlerl", "python3-sklearn", "python3-pandas", "COPY tasks " + str(cfg, "suite"), "MLERL_DEPS="} {
		if !strings.Contains(string(b), want) {
			t.Errorf("Containerfile lacks %q", want)
		}
	}
}

// checkServeToken checks that serve-env's token comes from a Secret
// mounted as the file its config names, and that the Secret ships no
// usable token (serve-env refuses an empty one: the operator creates the
// real one).
func checkServeToken(t *testing.T, m map[string][]obj, w workload, c any, got obj) {
	tf := str(got, "token_file")
	if tf == "" {
		t.Fatalf("serve-env listens on %s with no token_file: anyone in the cluster could run code in its sandbox", str(got, "addr"))
	}
	vol := ""
	for _, vm := range list(c, "volumeMounts") {
		if str(vm, "mountPath") == filepath.Dir(tf) {
			vol = str(vm, "name")
		}
	}
	secret := ""
	for _, v := range list(w.pod, "volumes") {
		if str(v, "name") == vol {
			secret = str(v, "secret", "secretName")
		}
	}
	if secret == "" {
		t.Fatalf("token_file %s is not in a mounted Secret volume (mount %q)", tf, vol)
	}
	found := false
	for _, sec := range m["Secret"] {
		if str(sec, "metadata", "name") != secret {
			continue
		}
		found = true
		key := filepath.Base(tf)
		if v, ok := get(sec, "stringData", key).(string); !ok || strings.TrimSpace(v) != "" {
			t.Errorf("Secret %s: key %s is %q; ship it empty (serve-env refuses an empty token) and create the real one with kubectl", secret, key, v)
		}
	}
	if !found {
		t.Errorf("serve-env mounts Secret %s, which the manifests do not define", secret)
	}
}

// TestServeEnvNetworkPolicy: a NetworkPolicy selects the serve-env pods
// and admits ingress only from pods labelled as the trainer, only to the
// port serve-env listens on.
func TestServeEnvNetworkPolicy(t *testing.T) {
	m := loadManifests(t)
	var pod obj
	port := 0
	for _, d := range m["Deployment"] {
		if str(d, "metadata", "name") == "mlerl-env" {
			pod = get(d, "spec", "template").(obj)
			for _, p := range list(list(d, "spec", "template", "spec", "containers")[0], "ports") {
				port = num(p, "containerPort")
			}
		}
	}
	if pod == nil {
		t.Fatal("no serve-env Deployment (mlerl-env)")
	}
	podLabels := get(pod, "metadata", "labels").(obj)
	var policies []obj
	for _, np := range m["NetworkPolicy"] {
		sel, _ := get(np, "spec", "podSelector", "matchLabels").(obj)
		match := len(sel) > 0
		for k, v := range sel {
			if podLabels[k] != v {
				match = false
			}
		}
		if match {
			policies = append(policies, np)
		}
	}
	if len(policies) != 1 {
		t.Fatalf("%d NetworkPolicies select the serve-env pods (labels %v), want 1", len(policies), podLabels)
	}
	np := policies[0]
	if types := list(np, "spec", "policyTypes"); len(types) != 1 || types[0] != "Ingress" {
		t.Errorf("policyTypes %v, want [Ingress]", types)
	}
	rules := list(np, "spec", "ingress")
	if len(rules) != 1 {
		t.Fatalf("%d ingress rules, want 1 (the trainer)", len(rules))
	}
	from := list(rules[0], "from")
	if len(from) != 1 || str(from[0], "podSelector", "matchLabels", "mlerl.dev/role") != "trainer" || get(from[0], "ipBlock") != nil || get(from[0], "namespaceSelector") != nil {
		t.Errorf("ingress from %v: want only pods labelled mlerl.dev/role: trainer", from)
	}
	ports := list(rules[0], "ports")
	if len(ports) != 1 || num(ports[0], "port") != port || str(ports[0], "protocol") != "TCP" {
		t.Errorf("ingress ports %v: want only TCP %d, serve-env's port", ports, port)
	}
}
