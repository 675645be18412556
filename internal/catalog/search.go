package catalog

// The catalog search: the edit combinations the built-in suite's m_best
// was measured with (internal/catalog TestMeasureHeadroom, tasks/README.md),
// and that `mlerl ingest tasks --m_best measure` runs on an imported task.

// Kind names the edit lists that fit a task: its modality, and for a
// tabular task whether it is a classification, a regression or a
// multi-label task ("tabular/clf", "tabular/reg", "tabular/multilabel").
func Kind(modality, taskType string) string {
	switch {
	case modality != tabular:
		return modality
	case taskType == multilabel:
		return "tabular/multilabel"
	case taskType == regression || taskType == count || taskType == forecast:
		return "tabular/reg"
	}
	return "tabular/clf"
}

// Search returns the catalog search for a task of that modality and type,
// as lists of idea ids applied in order: first the obvious edits (what a
// first attempt would try: single ideas or data + model compositions),
// then the strong combinations that widen the search (usually ending with
// a refit on train + valid). Both are empty for a kind the catalog has no
// lists for. The slices are shared; do not modify them.
func Search(modality, taskType string) (obvious, strong [][]string) {
	k := Kind(modality, taskType)
	return obviousByKind[k], strongByKind[k]
}

// Edit lists per kind of task (see [Kind]).
var (
	obviousByKind = map[string][][]string{
		"tabular/clf": {
			{"data/standard-scaler"},
			{"model/random-forest-n300-dnone"},
			{"model/hist-gradient-boosting-i100-lr0p1"},
			{"data/standard-scaler", "model/logreg-c1"},
			{"data/standard-scaler", "model/svc-rbf-c10"},
		},
		"tabular/reg": {
			{"model/random-forest-reg-n300-dnone"},
			{"model/hist-gradient-boosting-reg-i100-lr0p05"},
			{"model/gradient-boosting-reg-n100-lr0p05"},
			{"data/standard-scaler", "model/ridge-alpha1"},
			{"model/huber"},
		},
		"tabular/multilabel": {
			{"model/ml-random-forest-n500"},
			{"data/standard-scaler", "model/ml-ovr-logreg-c1"},
			{"data/standard-scaler", "model/ml-mlp"},
		},
		"image": {
			{"data/standard-scaler", "model/logreg-c1"},
			{"model/random-forest-n300-dnone"},
			{"data/standard-scaler", "model/svc-rbf-c10"},
			{"data/pixels-unit-range", "model/mlp-128-64"},
		},
		"text": {
			{"data/tfidf-ngram1-2-mindf1-sublinear", "model/text-logreg-c10"},
			{"data/counts-all-words-ngram1-1", "model/multinomial-nb-alpha0p5"},
			{"data/tfidf-ngram1-1-mindf1", "model/text-linear-svc-c1"},
		},
		"time-series": {
			{"data/fourier-2"},
			{"data/poly-trend-2"},
			{"data/seasonal-lag-1"},
			{"data/fourier-3", "data/poly-trend-2"},
		},
		"graph": {
			{"data/neighbor-mean-1hop"},
			{"data/neighbor-mean-2hop"},
			{"data/neighbor-label-fractions"},
			{"data/sgc-propagate-2", "model/logreg-c1"},
		},
	}
	strongByKind = map[string][][]string{
		"tabular/clf": {
			{"data/standard-scaler", "model/logreg-c0p1", "learning/refit-train-valid"},
			{"data/standard-scaler", "model/logreg-c10", "learning/refit-train-valid"},
			{"data/standard-scaler", "model/svc-rbf-c1", "learning/refit-train-valid"},
			{"data/standard-scaler", "model/mlp-64-alpha0p01", "learning/refit-train-valid"},
			{"model/gradient-boosting-n100-lr0p05", "learning/refit-train-valid"},
			{"model/extra-trees-n500", "learning/refit-train-valid"},
			{"model/random-forest-n300-d8", "learning/soft-voting-logreg", "learning/refit-train-valid"},
			{"data/standard-scaler", "model/lda-shrinkage", "learning/refit-train-valid"},
			{"data/onehot-low-cardinality-12", "model/scaled-logreg", "learning/refit-train-valid"},
			{"data/standard-scaler", "model/scaled-knn", "learning/refit-train-valid"},
			{"data/impute-median-indicator", "data/standard-scaler", "model/logreg-c1", "learning/refit-train-valid"},
			{"data/impute-median", "model/gradient-boosting-n100-lr0p05", "learning/refit-train-valid"},
		},
		"tabular/reg": {
			{"data/standard-scaler", "model/ridge-alpha10", "learning/refit-train-valid"},
			{"model/hist-gradient-boosting-poisson", "learning/refit-train-valid"},
			{"model/gradient-boosting-reg-absolute-error", "learning/refit-train-valid"},
			{"model/random-forest-reg-n300-d8", "learning/averaging-ridge", "learning/refit-train-valid"},
			{"model/poisson-glm-alpha1", "learning/refit-train-valid"},
			{"model/lasso-alpha0p1", "learning/refit-train-valid"},
			{"model/huber", "learning/refit-train-valid"},
			{"model/gradient-boosting-reg-n100-lr0p05", "learning/min-samples-leaf-10", "learning/refit-train-valid"},
			{"model/hist-gradient-boosting-reg-absolute-error", "learning/refit-train-valid"},
			{"data/log1p-skewed", "model/gradient-boosting-reg-absolute-error", "learning/refit-train-valid"},
			{"data/impute-median", "model/random-forest-reg-n300-d8", "learning/averaging-ridge", "learning/refit-train-valid"},
		},
		"tabular/multilabel": {
			{"data/standard-scaler", "model/ml-ovr-svc", "learning/refit-train-valid"},
			{"data/standard-scaler", "model/ml-classifier-chain", "learning/refit-train-valid"},
			{"data/quantile-normal", "model/ml-ovr-logreg-c0p1", "learning/refit-train-valid"},
			{"model/ml-ovr-hist-gradient-boosting", "learning/refit-train-valid"},
			{"data/standard-scaler", "model/ml-knn-k15", "learning/refit-train-valid"},
		},
		"image": {
			{"data/pixels-unit-range", "model/svc-rbf-c10", "learning/refit-train-valid"},
			{"data/augment-shift-4", "model/scaled-svc", "learning/refit-train-valid"},
			{"data/median-filter-3", "model/scaled-svc", "learning/refit-train-valid"},
			{"data/hog-8", "model/scaled-svc", "learning/refit-train-valid"},
			{"data/median-filter-3", "model/extra-trees-n500", "learning/refit-train-valid"},
			{"data/pixels-unit-range", "model/mlp-128-64", "learning/refit-train-valid"},
			{"data/augment-shift-8", "model/extra-trees-n500", "learning/refit-train-valid"},
			{"data/augment-shift-8", "model/scaled-svc", "learning/refit-train-valid"},
		},
		"text": {
			{"data/tfidf-ngram1-2-mindf1-sublinear", "model/text-logreg-c100", "learning/refit-train-valid"},
			{"data/mark-negations", "model/text-logreg-c10", "learning/refit-train-valid"},
			{"data/tfidf-ngram1-3-mindf1-sublinear", "model/text-linear-svc-c1", "learning/refit-train-valid"},
			{"data/tfidf-words-and-chars", "model/text-logreg-c10", "learning/refit-train-valid"},
			{"data/binary-all-words-ngram1-2", "model/multinomial-nb-alpha0p1", "learning/refit-train-valid"},
			{"data/tfidf-ngram1-2-mindf1-sublinear", "model/complement-nb-alpha0p3", "learning/refit-train-valid"},
			{"data/tfidf-ngram1-2-mindf1-sublinear", "model/text-logreg-c10", "learning/class-weight-balanced"},
			{"data/mark-negations", "data/tfidf-ngram1-2-mindf1-sublinear", "model/text-logreg-c10", "learning/refit-train-valid"},
			{"data/mark-negations", "data/tfidf-ngram1-3-mindf1-sublinear", "model/text-linear-svc-c1", "learning/refit-train-valid"},
			{"data/counts-all-words-ngram1-1", "model/complement-nb-alpha1", "learning/refit-train-valid"},
		},
		"time-series": {
			{"data/interpolate-missing", "data/fourier-3", "data/poly-trend-2"},
			{"data/interpolate-missing", "data/fourier-4", "data/poly-trend-3"},
			{"data/fourier-3", "data/poly-trend-2", "learning/refit-train-valid"},
			{"data/interpolate-missing", "data/seasonal-lag-2", "data/poly-trend-2"},
			{"data/fourier-2", "data/poly-trend-2", "data/seasonal-lag-1"},
			{"data/fourier-3", "model/hist-gradient-boosting-reg-i100-lr0p05", "learning/trend-plus-residual-quadratic"},
			{"data/recent-window-0p25", "data/fourier-3", "learning/refit-train-valid"},
			{"data/fourier-6", "model/ridge-alpha1"},
			{"data/fourier-2", "data/poly-trend-2", "data/seasonal-lag-1", "learning/refit-train-valid"},
			{"data/interpolate-missing", "data/fourier-3", "data/poly-trend-2", "data/seasonal-lag-1", "learning/refit-train-valid"},
		},
		"graph": {
			{"data/neighbor-mean-2hop", "model/logreg-c1", "learning/refit-train-valid"},
			{"data/sgc-propagate-2", "model/scaled-logreg", "learning/refit-train-valid"},
			{"data/sgc-propagate-3", "model/scaled-logreg", "learning/refit-train-valid"},
			{"data/label-propagation-0p9", "model/scaled-logreg", "learning/refit-train-valid"},
			{"data/neighbor-mean-3hop", "model/scaled-svc", "learning/refit-train-valid"},
			{"data/two-hop-label-fractions", "model/hist-gradient-boosting-i100-lr0p05", "learning/refit-train-valid"},
			{"data/spectral-embedding-16", "model/scaled-logreg", "learning/refit-train-valid"},
			{"data/sgc-propagate-3", "data/neighbor-label-fractions", "model/scaled-logreg", "learning/refit-train-valid"},
		},
	}
)
