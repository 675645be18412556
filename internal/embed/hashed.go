package embed

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"unicode"
)

// Hashed is the built-in embedder: TF-IDF over hashed features, needing no
// model or network.
//
// Features of a text (lower-cased; words are maximal runs of letters and
// digits):
//   - every word (weight 1) and every pair of adjacent words (weight 1);
//   - every character 3-gram and 4-gram of "<word>" (weight 0.5 each), so
//     "standardise" and "standardize" or "scaler" and "scaling" stay close.
//
// A feature's term frequency is sublinear (1 + ln tf). Its inverse document
// frequency is fitted on the texts of each Embed call, with sklearn's
// smoothing: idf = ln((1+n)/(1+df)) + 1. Vectors from one call are
// therefore comparable with each other; embed a whole pool in one call.
// Each feature is hashed (FNV-1a 64) to one of Dim buckets with a hashed
// sign, so collisions cancel on average rather than add up. The vector is
// L2-normalised; a text without any word gives the zero vector.
type Hashed struct {
	dim int
}

// NewHashed returns a hashed TF-IDF embedder of dimension dim.
func NewHashed(dim int) *Hashed { return &Hashed{dim: dim} }

// Dim implements [Embedder].
func (h *Hashed) Dim() int { return h.dim }

// Name implements [Embedder].
func (h *Hashed) Name() string { return fmt.Sprintf("hashed-tfidf:%d", h.dim) }

// Embed implements [Embedder].
func (h *Hashed) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if h.dim <= 0 {
		return nil, fmt.Errorf("hashed embedder: dimension %d, want > 0", h.dim)
	}
	docs := make([]map[uint64]float64, len(texts)) // feature hash -> weighted tf
	df := map[uint64]int{}
	for i, t := range texts {
		docs[i] = features(t)
		for f := range docs[i] {
			df[f]++
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := float64(len(texts))
	out := make([][]float32, len(texts))
	for i, doc := range docs {
		v := make([]float32, h.dim)
		for f, tf := range doc {
			idf := math.Log((1+n)/(1+float64(df[f]))) + 1
			w := float32(tf * idf)
			if f>>63 == 1 { // the top bit is the sign; the rest picks the bucket
				w = -w
			}
			v[(f&(1<<63-1))%uint64(h.dim)] += w
		}
		normalize(v)
		out[i] = v
	}
	return out, nil
}

// features returns a text's hashed features with their sublinear,
// weighted term frequencies.
func features(text string) map[uint64]float64 {
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	counts := map[uint64]float64{}
	weight := map[uint64]float64{}
	add := func(kind byte, s string, w float64) {
		h := fnv.New64a()
		h.Write([]byte{kind})
		h.Write([]byte(s))
		f := h.Sum64()
		counts[f]++
		weight[f] = w
	}
	for k, w := range words {
		add('w', w, 1)
		if k > 0 {
			add('b', words[k-1]+" "+w, 1)
		}
		r := []rune("<" + w + ">")
		for n := 3; n <= 4; n++ {
			for j := 0; j+n <= len(r); j++ {
				add('c', string(r[j:j+n]), 0.5)
			}
		}
	}
	for f, c := range counts {
		counts[f] = (1 + math.Log(c)) * weight[f]
	}
	return counts
}
