#!/usr/bin/env bash
# interop.sh: the `make interop` driver (after `make setup build`). Checks
# mlerl's exports and environment server with the real trainers from
# PyPI, LLaMA-Factory and verl, and prints one line per check:
#
#   install                    the venv (scripts/setup_interop.sh; reused)
#   demo data                  a small data root made as scripts/demo.sh
#                              makes it, its exports' tokens counted with
#                              the tiny Qwen2 checkpoint (--export_tokenizer)
#   then the Go tests of internal/interop, one line each (what each proves
#   is written above it there).
#
#   scripts/interop.sh [DATA]     # DATA: data root, default ./data-interop
#
# DATA is reused: the ingest and rollout run only when it holds no steps,
# the dataset stage finds its versions when nothing changed. Every log is
# kept in DATA/interop-logs/. Exit status 1 when a check fails.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA="${1:-./data-interop}"
BIN="${MLERL_BIN:-bin/mlerl}"
CKPT=policy/hf/testdata/ckpt/qwen2
export GOEXPERIMENT="${GOEXPERIMENT:-simd}"
export MLERL_DEPS="${MLERL_DEPS:-$PWD/.deps}"
LOGS="$DATA/interop-logs"
mkdir -p "$LOGS"
line() { printf 'interop: %-26s %s\n' "$1" "$2"; }
fail() {
	line "$1" "FAIL: $2"
	exit 1
}

t0=$(date +%s)
if ! scripts/setup_interop.sh >"$LOGS/install.log" 2>&1; then
	tail -n 20 "$LOGS/install.log" >&2
	fail install "scripts/setup_interop.sh failed (log: $LOGS/install.log)"
fi
line install "ok ($(sed -n 's/^setup_interop: ready: .*(\(.*\))$/\1/p' "$LOGS/install.log"); $(du -sh "${MLERL_INTEROP_VENV:-.deps/interop}" | cut -f1), $(($(date +%s) - t0))s)"

t0=$(date +%s)
[ -x "$BIN" ] || fail "demo data" "$BIN not found; run \`make build\`"
stage() { # stage NAME ARGS...: one mlerl stage, its output in LOGS/NAME.log
	local name="$1"
	shift
	if ! "$BIN" "$@" --data "$DATA" >"$LOGS/$name.log" 2>&1; then
		tail -n 20 "$LOGS/$name.log" >&2
		fail "demo data" "mlerl $* failed (log: $LOGS/$name.log)"
	fi
}
if [ ! -e "$DATA/steps" ]; then
	stage ingest-tasks ingest tasks --suite demo
	stage ingest-ideas ingest ideas --source catalog
	stage rollout rollout --split held-in --per_task 2 --env.max_steps 6
fi
stage dataset dataset --export_tokenizer "$CKPT"
latest() { ls -d "$DATA/$1"/v* | sed 's/.*\/v//' | sort -n | tail -1; }
line "demo data" "ok ($DATA: sft_examples v$(latest sft_examples), rl_states v$(latest rl_states), exports' tokens counted with $CKPT; $(($(date +%s) - t0))s)"

# The checks, in this order; their names as printed.
checks=(
	TestLlamaFactoryReadsExport:llamafactory-reads-export
	TestLlamaFactoryTrainsLoRA:llamafactory-trains-lora
	TestEvaluateLlamaFactoryAdapter:mlerl-evaluates-adapter
	TestVerlLoadsExport:verl-loads-export
	TestVerlRewardThroughServeEnv:verl-reward-via-serve-env
	TestVerlTrainerOnCPU:verl-grpo-2-steps
)
run=""
for c in "${checks[@]}"; do run="$run|${c%%:*}"; done
set +e
MLERL_INTEROP_DATA="$DATA" MLERL_BIN="$BIN" go test -count=1 -v -timeout 40m -run "^(${run#|})\$" ./internal/interop >"$LOGS/checks.log" 2>&1
rc=$?
set -e
status=0
for c in "${checks[@]}"; do
	name="${c%%:*}" label="${c#*:}"
	# The test's verdict and time, and its summary, skip reason or first error.
	verdict=$(sed -n "s/^--- \(PASS\|FAIL\|SKIP\): $name (\([0-9.]*\)s)$/\1 \2/p" "$LOGS/checks.log")
	detail=$(awk -v t="$name" '
		$0 ~ "^=== RUN   " t "$" { in_t = 1; next }
		/^=== RUN   / && $0 !~ "^=== RUN   " t "/" { in_t = 0 }
		/^--- / { in_t = 0 }
		in_t && /_test\.go:[0-9]+: / {
			sub(/^ *[a-z_]*_test\.go:[0-9]+: /, "")
			if ($0 ~ /^(summary|skipped): /) { sub(/^summary: /, ""); last = $0 } else if (first == "") { first = $0 }
		}
		END { print (last != "" ? last : first) }' "$LOGS/checks.log")
	case "${verdict%% *}" in
	PASS) line "$label" "ok (${verdict#* }s): $detail" ;;
	SKIP) line "$label" "$detail (${verdict#* }s)" ;;
	FAIL)
		line "$label" "FAIL (${verdict#* }s): $detail"
		status=1
		;;
	*)
		line "$label" "FAIL: no verdict (go test exit $rc; log: $LOGS/checks.log)"
		status=1
		;;
	esac
done
[ "$status" = 0 ] || echo "interop: the whole log: $LOGS/checks.log" >&2
exit "$status"
