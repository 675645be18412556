package main

import (
	"os"
	"runtime/debug"
)

// defaultGCPercent is the garbage collector's target (GOGC) for the
// commands that train or run a policy (runsThePolicy) when the environment
// sets none; the others keep Go's default (ingest tasks took 13-18% more
// CPU at 25 for no less memory: its heap is small). Go's 100 lets the
// heap grow to twice what is live before collecting; the policy stages'
// live heap is mostly a few large pointer-free buffers (the decoders' key
// and value caches, weights, optimiser state) that the collector never
// scans, so collecting sooner costs little time and saves most of that
// doubling: a train ppo update on SmolLM2 peaked at 4.1 GB resident with
// 100, 2.9 GB with 25, for 3.6% more CPU (docs/benchmarks/memory.md).
const defaultGCPercent = 25

// setGCPercent applies defaultGCPercent unless GOGC is set (which the
// runtime has applied), and returns the target in force.
func setGCPercent() int {
	if v, ok := os.LookupEnv("GOGC"); ok && v != "" {
		prev := debug.SetGCPercent(100)
		debug.SetGCPercent(prev)
		return prev
	}
	debug.SetGCPercent(defaultGCPercent)
	return defaultGCPercent
}
