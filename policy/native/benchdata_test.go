package native

import (
	"encoding/binary"
	"os"
	"testing"
)

// TestWritePPOBenchData writes BenchmarkPPOLearner's two batches (4
// states x 8 samples, seed 1: unshared, then shared) for
// scripts/bench_torch.py's ppo row when MLERL_BENCH_PPO_DATA names a file,
// so that PyTorch trains on exactly the packing the native engine does;
// without it the test is skipped. Per batch, little-endian int32: B, S;
// tokens, positions, segments, prefix (B*S each, prefix all zero when the
// batch has none); n, the head positions idx[n] and their targets[n]; m,
// each sample's value position value_at[m] (an index into idx); the real
// and the sample token counts.
func TestWritePPOBenchData(t *testing.T) {
	path := os.Getenv("MLERL_BENCH_PPO_DATA")
	if path == "" {
		t.Skip("MLERL_BENCH_PPO_DATA not set: nothing to write (scripts/bench.sh sets it)")
	}
	unshared, shared := ppoBatches(4, 8, 1)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, pb := range []ppoBatch{unshared, shared} {
		prefix := pb.Prefix
		if prefix == nil {
			prefix = make([]int32, pb.B*pb.S)
		}
		valueAt := make([]int32, len(pb.valueAt))
		for i, v := range pb.valueAt {
			valueAt[i] = int32(v)
		}
		for _, v := range []any{
			[]int32{int32(pb.B), int32(pb.S)}, pb.Tokens, pb.Positions, pb.Segments, prefix,
			int32(len(pb.idx)), pb.idx, pb.targets, int32(len(valueAt)), valueAt,
			[]int32{int32(pb.real), int32(pb.sample)},
		} {
			if err := binary.Write(f, binary.LittleEndian, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
