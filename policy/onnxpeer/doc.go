// Package onnxpeer runs the policy's generation with ONNX Runtime, a
// second engine beside the native one (policy/native) on the same
// weights: a peer to measure the native engine against, with the
// runtime the embedder already ships (no new dependency).
//
// Where to start:
//
// [Export] writes a native [native.Model]'s weights into ONNX graphs
// ([Graphs]), encoded directly in the protobuf wire format (proto.go):
// prefill (token ids [batch, seq] -> the last position's logits and
// every layer's keys and values) and decode (one token per row and the
// cache [batch, heads, past, head_dim] -> logits and the cache extended
// by one, the standard past/present form), plus DecodeInPlace (the same
// step on a fixed-capacity cache the caller updates, which is never
// copied). [New] loads them into ONNX Runtime sessions ([Options]:
// library, intra-op threads, spinning, in place); [Runner.NewCache],
// [Runner.Prefill] and [Runner.Decode] generate with a KV cache as the
// native engine's Extend and Decode do, and [Runner.Greedy] is the whole
// greedy loop. Every row of a batch holds the same number of tokens
// (prompts of one length).
//
// The graphs compute exactly the native engine's function (export.go
// lists it); the tests check prefill and decode logits (both decode
// graphs) and greedy tokens against the native engine.
// BenchmarkGeneratePeer compares the two engines' generation on the demo
// policy's shape, batch 1 and 32, with the same thread count (make bench
// runs it).
package onnxpeer
