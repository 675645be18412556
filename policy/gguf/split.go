package gguf

import (
	"fmt"
	"path/filepath"
	"regexp"
)

// Split models. llama.cpp's gguf-split cuts a model into shards named
// PREFIX-00001-of-0000N.gguf ... PREFIX-0000N-of-0000N.gguf, each a GGUF
// file of its own: the first holds every metadata key and some tensors
// (or none, with --no-tensor-first-split), the others only their tensors,
// and every shard carries split.no (its index from 0), split.count (N)
// and split.tensors.count (the tensors of all shards). llama.cpp is given
// the first shard and finds the others by name in its folder; so is
// mlerl (Open, Load, --policy gguf:FIRST-SHARD).

// Metadata keys of a split model.
const (
	keySplitNo      = "split.no"
	keySplitCount   = "split.count"
	keySplitTensors = "split.tensors.count"
	// maxShards bounds split.count (gguf-split writes at most 99999).
	maxShards = 99999
)

// shardName matches a shard's file name: its prefix, index and count.
var shardName = regexp.MustCompile(`^(.*)-(\d{5})-of-(\d{5})\.gguf$`)

// shardPath is llama.cpp's name of shard i (from 1) of n.
func shardPath(prefix string, i, n int) string {
	return fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, i, n)
}

// splitKeys reads a file's split.no and split.count; n is 0 for a file
// that is not part of a split model (no split.count, or 1).
func (f *File) splitKeys() (no, n int, err error) {
	count, ok, err := f.Int(keySplitCount)
	if err != nil || !ok || count == 1 {
		return 0, 0, err
	}
	if count < 1 || count > maxShards {
		return 0, 0, fmt.Errorf("%s: metadata %q is %d: want 1 to %d shards", f.Path, keySplitCount, count, maxShards)
	}
	idx, ok, err := f.Int(keySplitNo)
	if err != nil {
		return 0, 0, err
	}
	if !ok || idx < 0 || idx >= count {
		return 0, 0, fmt.Errorf("%s: metadata %q is missing or outside 0..%d though %q is %d: corrupt shard", f.Path, keySplitNo, count-1, keySplitCount, count)
	}
	return int(idx), int(count), nil
}

// openShards opens the other shards of a split model whose first shard
// f is, and adds their tensors to f's table; nothing for a whole file.
// Each shard is checked as Open checks a file, and against the first:
// named as gguf-split names it, its split.no its place, the same
// split.count, no tensor twice, and all of them split.tensors.count.
func (f *File) openShards() error {
	no, n, err := f.splitKeys()
	if err != nil || n == 0 {
		return err
	}
	m := shardName.FindStringSubmatch(f.Path)
	if no != 0 {
		first := "its first shard"
		if m != nil {
			first = filepath.Base(shardPath(m[1], 1, n))
		}
		return fmt.Errorf("%s is shard %d of %d of a split model (llama.cpp's gguf-split): give %s, which opens the others", f.Path, no+1, n, first)
	}
	if m == nil || m[2] != "00001" || m[3] != fmt.Sprintf("%05d", n) {
		return fmt.Errorf("%s is the first of %d shards of a split model, but not named PREFIX-00001-of-%05d.gguf as gguf-split names it: the other shards are found by that name; rename the shards as gguf-split wrote them", f.Path, n, n)
	}
	want, ok, err := f.Int(keySplitTensors)
	if err != nil {
		return err
	}
	for i := 2; i <= n; i++ {
		path := shardPath(m[1], i, n)
		s, err := openOne(path)
		if err != nil {
			return fmt.Errorf("%s: shard %d of %d of the split model: %w (every shard must be in the first one's folder)", f.Path, i, n, err)
		}
		f.shards = append(f.shards, s)
		sNo, sN, err := s.splitKeys()
		if err != nil {
			return err
		}
		if sN != n || sNo != i-1 {
			return fmt.Errorf("%s: its %s is %d and %s %d, want %d and %d: it is not shard %d of %s's model", path, keySplitNo, sNo, keySplitCount, sN, i-1, n, i, filepath.Base(f.Path))
		}
		for _, t := range s.Tensors {
			if _, dup := f.byName[t.Name]; dup {
				return fmt.Errorf("%s: tensor %q is also in an earlier shard: corrupt split", path, t.Name)
			}
			t.shard = i - 1
			f.byName[t.Name] = len(f.Tensors)
			f.Tensors = append(f.Tensors, t)
		}
	}
	if ok && want != int64(len(f.Tensors)) {
		return fmt.Errorf("%s: the %d shards hold %d tensors, %q says %d: a shard is from another split", f.Path, n, len(f.Tensors), keySplitTensors, want)
	}
	return nil
}

// Paths are the files f reads: its own, then a split model's other
// shards in order.
func (f *File) Paths() []string {
	out := []string{f.Path}
	for _, s := range f.shards {
		out = append(out, s.Path)
	}
	return out
}
