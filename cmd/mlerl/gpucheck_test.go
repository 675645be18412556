package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGPUCheckScript runs scripts/gpu_check.sh (make gpu-check) up to the
// point a CPU machine can: without a GPU it says so in one line and exits
// 0; with a GPU (a stand-in nvidia-smi) it finds the PJRT CUDA plugin in
// go-xla's places or in JAX's wheel layout (a dry run says what it would
// use), and without one it stops, saying what to install; past the dry
// run, without Go it asks for prebuilt binaries (GPU_CHECK_BIN,
// GPU_CHECK_POLICY_TEST) and refuses ones that are not executables. The
// GPU half itself needs a GPU (see the script; BENCHMARKS.md has its one
// run).
func TestGPUCheckScript(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	// A real interpreter, not a shim that needs more of the PATH.
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		if python, err = exec.LookPath("python3"); err != nil {
			t.Skip("no python3")
		}
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "gpu_check.sh"))
	if err != nil {
		t.Fatal(err)
	}
	// tools is a PATH of only what the script's first half uses, so that
	// no nvidia-smi of this machine is found unless a case adds one.
	tools := t.TempDir()
	for _, name := range []string{"dirname", "head", "nproc", "find", "sort", "tr", "cat", "rm", "date", "mkdir", "grep", "sed", "mktemp"} {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("no %s", name)
		}
		if err := os.Symlink(p, filepath.Join(tools, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(python, filepath.Join(tools, "python3")); err != nil {
		t.Fatal(err)
	}
	fakeSMI := func(dir, out string, code int) {
		sh := "#!/bin/sh\ncase \"$*\" in *driver_version*) echo 550.54.15 ;; *) printf '%s' '" + out + "' ;; esac\nexit " + string(rune('0'+code)) + "\n"
		if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(sh), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	touch := func(p string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const gpu = "NVIDIA H200, 143771 MiB"
	jaxSite := t.TempDir() // JAX's wheels as pip lays them out
	plugin := filepath.Join(jaxSite, "jax_plugins", "xla_cuda12", "xla_cuda_plugin.so")
	touch(plugin)
	touch(filepath.Join(jaxSite, "nvidia", "cublas", "lib", "libcublas.so.12"))
	touch(filepath.Join(jaxSite, "nvidia", "cuda_nvcc", "bin", "ptxas"))
	goxlaHome := t.TempDir() // go-xla's installer's layout
	touch(filepath.Join(goxlaHome, ".local", "lib", "go-xla", "nvidia", "pjrt_c_api_cuda_plugin.so"))

	cases := []struct {
		name       string
		smi        string // nvidia-smi's output; "-": no nvidia-smi
		smiCode    int
		home       string
		pythonPath string
		code       int
		want       []string // the lines of stdout (no GPU), or parts of stdout+stderr
		exact      bool
		env        []string // more environment; a case with env runs past the dry run
	}{
		{name: "no nvidia-smi", smi: "-", code: 0, exact: true,
			want: []string{"gpu-check: no CUDA GPU on this machine (no nvidia-smi); nothing to check"}},
		{name: "nvidia-smi finds no device", smi: "", smiCode: 9, code: 0, exact: true,
			want: []string{"gpu-check: no CUDA GPU on this machine (nvidia-smi lists no device); nothing to check"}},
		{name: "GPU, go-xla's plugin", smi: gpu, home: goxlaHome, code: 0,
			want: []string{"gpu-check: NVIDIA H200, 143771 MiB (550.54.15 driver)", "gpu-check: GoMLX backend xla:cuda\n"}},
		{name: "GPU, JAX's plugin", smi: gpu, pythonPath: jaxSite, code: 0,
			want: []string{"gpu-check: GoMLX backend xla:" + plugin + "\n", "LD_LIBRARY_PATH=" + filepath.Join(jaxSite, "nvidia", "cublas", "lib") + ":",
				"XLA_FLAGS=--xla_gpu_cuda_data_dir=" + filepath.Join(jaxSite, "nvidia", "cuda_nvcc")}},
		{name: "GPU, no plugin", smi: gpu, code: 1,
			want: []string{"gpu-check: found NVIDIA H200, 143771 MiB but no PJRT CUDA plugin: install JAX's (pip install -U \"jax[cuda12]\""}},
		{name: "GPU, no Go, no prebuilt binaries", smi: gpu, home: goxlaHome, code: 1, env: []string{"GO=go-not-here"},
			want: []string{"gpu-check: no Go toolchain (go-not-here) on the PATH: the check builds the binary; install Go 1.26, or give GPU_CHECK_BIN and GPU_CHECK_POLICY_TEST built elsewhere"}},
		{name: "GPU, prebuilt binaries that are not executables", smi: gpu, home: goxlaHome, code: 1,
			env:  []string{"GO=go-not-here", "GPU_CHECK_BIN=/nonexistent/mlerl", "GPU_CHECK_POLICY_TEST=/nonexistent/policy.test"},
			want: []string{"gpu-check: GPU_CHECK_BIN=/nonexistent/mlerl is not an executable file"}},
		{name: "GPU, PPO updates not a number", smi: gpu, home: goxlaHome, code: 1, env: []string{"GPU_CHECK_PPO_UPDATES=12x"},
			want: []string{"gpu-check: GPU_CHECK_PPO_UPDATES=12x: want a whole number of updates, 2 or more"}},
		{name: "GPU, one PPO update", smi: gpu, home: goxlaHome, code: 1, env: []string{"GPU_CHECK_PPO_UPDATES=1"},
			want: []string{"gpu-check: GPU_CHECK_PPO_UPDATES=1: want a whole number of updates, 2 or more"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bin := t.TempDir()
			if c.smi != "-" {
				fakeSMI(bin, c.smi, c.smiCode)
			}
			home := c.home
			if home == "" {
				home = t.TempDir()
			}
			cmd := exec.Command(bash, script)
			cmd.Dir = t.TempDir()
			cmd.Env = []string{"PATH=" + bin + ":" + tools, "HOME=" + home, "PYTHONPATH=" + c.pythonPath,
				"GPU_CHECK_PYTHON=python3", "TMPDIR=" + t.TempDir()}
			if c.env == nil {
				cmd.Env = append(cmd.Env, "GPU_CHECK_DRY_RUN=1")
			}
			cmd.Env = append(cmd.Env, c.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			out := stdout.String() + stderr.String()
			if code != c.code {
				t.Fatalf("exit %d, want %d; output:\n%s", code, c.code, out)
			}
			if c.exact {
				if got := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n"); len(got) != 1 || got[0] != c.want[0] || stderr.Len() > 0 {
					t.Errorf("got stdout %q, stderr %q; want the one line %q", stdout.String(), stderr.String(), c.want[0])
				}
				return
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
