package onnxpeer_test

import (
	"fmt"
	"log"

	"github.com/mlerl/mlerl/policy/native"
	"github.com/mlerl/mlerl/policy/onnxpeer"
)

// Export a native model and generate greedily with ONNX Runtime. (Not
// run as a test: it needs the library `make setup` installs.)
func ExampleRunner_Greedy() {
	m, err := native.New(native.Config{Vocab: 4096, DModel: 256, Heads: 4, Layers: 4, Ctx: 640}, 1)
	if err != nil {
		log.Fatal(err)
	}
	g, err := onnxpeer.Export(m)
	if err != nil {
		log.Fatal(err)
	}
	r, err := onnxpeer.New(g, onnxpeer.Options{}) // GOMAXPROCS intra-op threads
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	tokens, err := r.Greedy([][]int32{{2, 17, 300}, {2, 18, 301}}, 8)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(tokens), len(tokens[0]))
}
