// Package shard says which slice of a batch stage's work one process does.
//
// A stage that fans out runs as K processes; process i (0-based) takes the
// work items n with n mod K == i ([Shard.Owns]). The shard comes from a
// `--shard i/K` flag (config field `shard`) or, when that is empty, from a
// Kubernetes Indexed Job: the Job controller sets JOB_COMPLETION_INDEX in
// each pod, and the manifest sets MLERL_SHARDS to the Job's completions
// (Kubernetes does not expose the completion count itself). Start at
// [Resolve].
package shard

import (
	"fmt"
	"strconv"
	"strings"
)

// Environment variables read by [Resolve].
const (
	// EnvIndex is set by Kubernetes in every pod of an Indexed Job.
	EnvIndex = "JOB_COMPLETION_INDEX"
	// EnvCount is set by the manifest to the Job's spec.completions.
	EnvCount = "MLERL_SHARDS"
)

// Shard is slice Index of Count (0 <= Index < Count). The zero value is
// not valid; [All] is the whole work list.
type Shard struct {
	Index, Count int
}

// All is the single shard that owns every item.
var All = Shard{Index: 0, Count: 1}

// String renders the shard as "i/K", the form [Parse] reads.
func (s Shard) String() string { return fmt.Sprintf("%d/%d", s.Index, s.Count) }

// Owns reports whether item n (a 0-based position in the stage's fixed
// work order) belongs to this shard.
func (s Shard) Owns(n int) bool { return n%s.Count == s.Index }

// Parse reads "i/K"; the empty string is [All].
func Parse(s string) (Shard, error) {
	if s == "" {
		return All, nil
	}
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(strings.TrimSpace(a))
	k, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || k < 1 || i < 0 || i >= k {
		return Shard{}, fmt.Errorf("shard %q: want i/K with 0 <= i < K (e.g. 2/8)", s)
	}
	return Shard{Index: i, Count: k}, nil
}

// Resolve returns the shard given by flag ("i/K") when it is set, else the
// one given by the environment (getenv, normally os.Getenv), else [All].
// In the environment both variables must be set together, and the index
// must be below the count: a manifest whose completions and MLERL_SHARDS
// disagree is an error rather than a silently skipped slice of work.
func Resolve(flag string, getenv func(string) string) (Shard, error) {
	if flag != "" {
		return Parse(flag)
	}
	idx, cnt := strings.TrimSpace(getenv(EnvIndex)), strings.TrimSpace(getenv(EnvCount))
	switch {
	case idx == "" && cnt == "":
		return All, nil
	case cnt == "":
		return Shard{}, fmt.Errorf("%s=%s is set but %s is not: set %s to the Job's completions in the manifest, or pass --shard i/K", EnvIndex, idx, EnvCount, EnvCount)
	case idx == "":
		return Shard{}, fmt.Errorf("%s=%s is set but %s is not: run as a Kubernetes Indexed Job (completionMode: Indexed), or pass --shard i/K", EnvCount, cnt, EnvIndex)
	}
	i, err := strconv.Atoi(idx)
	if err != nil || i < 0 {
		return Shard{}, fmt.Errorf("%s=%q: want a non-negative integer", EnvIndex, idx)
	}
	k, err := strconv.Atoi(cnt)
	if err != nil || k < 1 {
		return Shard{}, fmt.Errorf("%s=%q: want a positive integer (the Job's completions)", EnvCount, cnt)
	}
	if i >= k {
		return Shard{}, fmt.Errorf("%s=%d is not below %s=%d: the Job's completions and %s disagree; make them equal", EnvIndex, i, EnvCount, k, EnvCount)
	}
	return Shard{Index: i, Count: k}, nil
}
