package embed

import (
	"context"
	"math"
	"strings"
	"testing"
)

func cosine(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

func TestHashedEmbedder(t *testing.T) {
	h := NewHashed(384)
	texts := []string{
		"Standardise the numeric features with StandardScaler",
		"Standardize the numeric features with a StandardScaler",
		"Replace the model with a gradient boosting classifier of 300 trees",
		"",
		"Standardise the numeric features with StandardScaler",
	}
	vecs, err := h.Embed(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	if len(vecs) != len(texts) {
		t.Fatalf("got %d vectors for %d texts", len(vecs), len(texts))
	}
	for i, v := range vecs {
		if len(v) != 384 {
			t.Fatalf("text %d: got dimension %d want 384", i, len(v))
		}
		norm := math.Sqrt(cosine(v, v))
		want := 1.0
		if texts[i] == "" {
			want = 0
		}
		if math.Abs(norm-want) > 1e-5 {
			t.Errorf("text %d: got norm %v want %v", i, norm, want)
		}
	}
	if s := cosine(vecs[0], vecs[4]); math.Abs(s-1) > 1e-5 {
		t.Errorf("identical texts: got cosine %v want 1", s)
	}
	near, far := cosine(vecs[0], vecs[1]), cosine(vecs[0], vecs[2])
	if near < 0.6 || far > 0.3 || near <= far {
		t.Errorf("got cosine %.3f between rewordings and %.3f between unrelated ideas; want rewordings > 0.6 > 0.3 > unrelated", near, far)
	}
	again, _ := h.Embed(context.Background(), texts)
	for i := range vecs {
		for j := range vecs[i] {
			if vecs[i][j] != again[i][j] {
				t.Fatalf("text %d: embedding not deterministic", i)
			}
		}
	}
	if h.Name() != "hashed-tfidf:384" || h.Dim() != 384 {
		t.Errorf("got name %q dim %d", h.Name(), h.Dim())
	}
}

func TestHashedIDFDownweightsCommonWords(t *testing.T) {
	// Every text shares "use the model"; only the last word differs, so
	// with IDF the texts must be far apart despite the shared words.
	texts := []string{"use the model xgboost", "use the model ridge", "use the model knn", "use the model svm"}
	vecs, _ := NewHashed(1024).Embed(context.Background(), texts)
	if s := cosine(vecs[0], vecs[1]); s > 0.7 {
		t.Errorf("got cosine %.3f between texts differing in their one rare word, want < 0.7", s)
	}
}

// BenchmarkHashed1k embeds 1,000 idea-like sentences in one call.
func BenchmarkHashed1k(b *testing.B) {
	words := []string{"standardise", "features", "gradient", "boosting", "trees", "learning", "rate", "dropout", "ridge", "alpha", "impute", "median", "polynomial", "degree", "ensemble", "bagging", "early", "stopping", "epochs", "batch"}
	texts := make([]string, 1000)
	for i := range texts {
		var sb []string
		for j := range 14 {
			sb = append(sb, words[(i*7+j*j+i/13)%len(words)])
		}
		texts[i] = strings.Join(sb, " ")
	}
	h := NewHashed(384)
	b.ResetTimer()
	for range b.N {
		if _, err := h.Embed(context.Background(), texts); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(texts)*b.N)/b.Elapsed().Seconds(), "texts/s")
}
