package embed

import (
	"context"
	"fmt"
	"sync"

	"github.com/mlerl/mlerl/internal/llm"
)

// Remote embeds through an OpenAI-compatible /v1/embeddings endpoint, in
// batches of at most batch texts (retries, rate limit and token accounting
// come from the llm client). Vectors are L2-normalised here, whatever the
// endpoint returns; every vector must have the dimension of the first.
type Remote struct {
	client *llm.Client
	batch  int

	mu  sync.Mutex
	dim int
}

// NewRemote returns an embedder using client; batch <= 0 means 64.
func NewRemote(client *llm.Client, batch int) *Remote {
	if batch <= 0 {
		batch = 64
	}
	return &Remote{client: client, batch: batch}
}

// Dim implements [Embedder]: 0 until the first answer arrives.
func (r *Remote) Dim() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dim
}

// Name implements [Embedder].
func (r *Remote) Name() string { return "openai:" + r.client.Model() }

// Usage returns the tokens and cost of every request so far.
func (r *Remote) Usage() llm.Usage {
	_, u := r.client.Totals()
	return u
}

// Embed implements [Embedder].
func (r *Remote) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for lo := 0; lo < len(texts); lo += r.batch {
		hi := min(lo+r.batch, len(texts))
		vecs, _, err := r.client.Embed(ctx, texts[lo:hi])
		if err != nil {
			return nil, fmt.Errorf("embed texts %d-%d: %w", lo, hi-1, err)
		}
		for k, v := range vecs {
			if err := r.checkDim(len(v)); err != nil {
				return nil, fmt.Errorf("embed text %d: %w", lo+k, err)
			}
			normalize(v)
			out = append(out, v)
		}
	}
	return out, nil
}

func (r *Remote) checkDim(d int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d == 0 {
		return fmt.Errorf("endpoint returned an empty embedding (model %s)", r.client.Model())
	}
	if r.dim == 0 {
		r.dim = d
	}
	if d != r.dim {
		return fmt.Errorf("endpoint returned a %d-dimensional embedding after %d-dimensional ones (model %s)", d, r.dim, r.client.Model())
	}
	return nil
}
