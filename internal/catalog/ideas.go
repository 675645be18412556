package catalog

import (
	"fmt"
	"strings"
	"sync"
)

// All returns every catalog idea, in a stable order: data ideas, then
// model ideas, then learning ideas. The slice is shared; do not modify it.
func All() []Idea {
	buildOnce.Do(func() { builtin = build() })
	return builtin
}

var (
	buildOnce sync.Once
	builtin   []Idea
)

// Modalities and task types of the built-in suite (tasks/README.md).
const (
	tabular    = "tabular"
	image      = "image"
	text       = "text"
	timeSeries = "time-series"
	graph      = "graph"

	binary     = "binary-classification"
	multiclass = "multiclass-classification"
	multilabel = "multilabel-classification"
	regression = "regression"
	count      = "count-regression" // a regression whose target is a count
	forecast   = "forecasting"
)

// Restriction lists used below.
var (
	denseMods   = []string{tabular, image, graph} // inputs are a dense feature matrix
	singleClass = []string{binary, multiclass}    // one label column
	allClass    = []string{binary, multiclass, multilabel}
	regTypes    = []string{regression, count, forecast}
)

// The catalog is built by one function per family of ideas; each family
// loops over its parameters so that variants of one idea exist (several
// n_estimators, C values, n-gram ranges...). The Python each edit inserts
// imports what it uses, so edits from different categories compose.
func build() []Idea {
	var c cat
	c.tabularData()
	c.imageData()
	c.textData()
	c.timeSeriesData()
	c.graphData()
	c.classifierModels()
	c.textModels()
	c.regressorModels()
	c.multilabelModels()
	c.hyperparameters()
	c.trainingProcedures()
	return c.ideas
}

type cat struct{ ideas []Idea }

func (c *cat) add(id, category, text string, mods, types []string, ops ...Op) {
	c.ideas = append(c.ideas, Idea{ID: category + "/" + id, Category: category, Text: text, Modalities: mods, TaskTypes: types, Edit: Edit{Ops: ops}})
}

func appendTo(section, code string) Op {
	return Op{Section: section, Op: "append", Code: strings.TrimLeft(code, "\n")}
}
func prependTo(section, code string) Op {
	return Op{Section: section, Op: "prepend", Code: strings.TrimLeft(code, "\n")}
}
func replace(section, code string) Op {
	return Op{Section: section, Op: "replace", Code: strings.TrimLeft(code, "\n")}
}
func sub(section, pattern, repl string) Op {
	return Op{Section: section, Op: "sub", Pattern: pattern, Repl: repl}
}

// py renders a Python literal for a parameter value.
func py(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case string:
		return fmt.Sprintf("%q", x)
	case float64:
		s := fmt.Sprintf("%g", x)
		if !strings.ContainsAny(s, ".e") {
			s += ".0"
		}
		return s
	default:
		return fmt.Sprint(x)
	}
}

// slug renders a parameter value for an idea ID.
func slug(v any) string {
	s := strings.NewReplacer(".", "p", "-", "m", "+", "", "(", "", ")", "", ", ", "-", ",", "-", " ", "").Replace(fmt.Sprint(v))
	if v == nil {
		return "none"
	}
	return strings.ToLower(s)
}

// asArrays makes the three feature matrices float arrays (copies).
const asArrays = "X_train, X_valid, X_test = (np.array(_x, dtype=float) for _x in (X_train, X_valid, X_test))\n"

// transform fits a transformer on X_train and applies it to all splits.
func transform(imports, ctor string) string {
	return imports + "\n_t = " + ctor + ".fit(X_train)\n" +
		"X_train, X_valid, X_test = _t.transform(X_train), _t.transform(X_valid), _t.transform(X_test)\n"
}

// ---------------------------------------------------------------- data

func (c *cat) tabularData() {
	const cat = "data"
	scalers := []struct{ id, text, imp, ctor string }{
		{"standard-scaler", "Standardise every feature to zero mean and unit variance with StandardScaler fitted on the training split", "from sklearn.preprocessing import StandardScaler", "StandardScaler()"},
		{"minmax-scaler", "Rescale every feature to [0, 1] with MinMaxScaler fitted on the training split", "from sklearn.preprocessing import MinMaxScaler", "MinMaxScaler()"},
		{"robust-scaler", "Scale features robustly to outliers (median and interquartile range) with RobustScaler", "from sklearn.preprocessing import RobustScaler", "RobustScaler()"},
		{"maxabs-scaler", "Scale every feature by its maximum absolute value with MaxAbsScaler", "from sklearn.preprocessing import MaxAbsScaler", "MaxAbsScaler()"},
		{"quantile-normal", "Map every feature to a normal distribution with QuantileTransformer(output_distribution='normal')", "from sklearn.preprocessing import QuantileTransformer", `QuantileTransformer(n_quantiles=min(200, len(X_train)), output_distribution="normal", random_state=0)`},
		{"quantile-uniform", "Map every feature to its quantile rank in [0, 1] with QuantileTransformer", "from sklearn.preprocessing import QuantileTransformer", `QuantileTransformer(n_quantiles=min(200, len(X_train)), random_state=0)`},
		{"power-transform", "Make features more Gaussian with a Yeo-Johnson PowerTransformer (which also standardises them)", "from sklearn.preprocessing import PowerTransformer", `PowerTransformer(method="yeo-johnson")`},
	}
	for _, s := range scalers {
		c.add(s.id, cat, s.text, denseMods, nil, appendTo("data", transform(s.imp, s.ctor)))
	}
	for _, m := range []struct {
		id, text, strategy string
		indicator          bool
	}{
		{"impute-median", "Fill missing values with each feature's training median (SimpleImputer)", "median", false},
		{"impute-mean", "Fill missing values with each feature's training mean (SimpleImputer)", "mean", false},
		{"impute-median-indicator", "Fill missing values with each feature's training median and add a 0/1 column per feature that had missing values (SimpleImputer with add_indicator)", "median", true},
	} {
		c.add(m.id, cat, m.text, []string{tabular}, nil, appendTo("data", transform("from sklearn.impute import SimpleImputer",
			fmt.Sprintf("SimpleImputer(strategy=%q, add_indicator=%s)", m.strategy, py(m.indicator)))))
	}
	for _, inter := range []bool{false, true} {
		id, text := "polynomial-degree2", "Add all degree-2 polynomial features (squares and pairwise products) with PolynomialFeatures"
		if inter {
			id, text = "interactions-degree2", "Add pairwise interaction features (products of two features, no squares) with PolynomialFeatures(interaction_only=True)"
		}
		c.add(id, cat, text, []string{tabular}, nil, appendTo("data", transform("from sklearn.preprocessing import PolynomialFeatures",
			fmt.Sprintf("PolynomialFeatures(degree=2, interaction_only=%s, include_bias=False)", py(inter)))))
	}
	for _, v := range []float64{0.8, 0.9, 0.95, 0.99} {
		for _, w := range []bool{false, true} {
			id := "pca-" + slug(v)
			text := fmt.Sprintf("Project the features with PCA keeping %g%% of the variance", v*100)
			if w {
				id += "-whiten"
				text += ", whitened to unit variance"
			}
			c.add(id, cat, text, denseMods, nil, appendTo("data", transform("from sklearn.decomposition import PCA",
				fmt.Sprintf("PCA(n_components=%s, whiten=%s, random_state=0)", py(v), py(w)))))
		}
	}
	for _, k := range []int{5, 10, 20} {
		for _, f := range []struct{ id, name, fn, types string }{
			{"anova", "an ANOVA F-test against the class", "f_classif", "clf"},
			{"mi", "mutual information with the class", "functools.partial(mutual_info_classif, random_state=0)", "clf"},
			{"ftest", "a univariate linear-regression F-test", "f_regression", "reg"},
			{"mi", "mutual information with the target value", "functools.partial(mutual_info_regression, random_state=0)", "reg"},
		} {
			types, imp := singleClass, "import functools\nfrom sklearn.feature_selection import SelectKBest, f_classif, mutual_info_classif"
			if f.types == "reg" {
				types, imp = []string{regression, count}, "import functools\nfrom sklearn.feature_selection import SelectKBest, f_regression, mutual_info_regression"
			}
			c.add(fmt.Sprintf("select-k%d-%s-%s", k, f.id, f.types), cat,
				fmt.Sprintf("Keep only the %d features most related to the target by %s (SelectKBest)", k, f.name),
				denseMods, types, appendTo("data", imp+"\n"+
					fmt.Sprintf("_t = SelectKBest(%s, k=min(%d, np.shape(X_train)[1])).fit(X_train, y_train)\n", f.fn, k)+
					"X_train, X_valid, X_test = _t.transform(X_train), _t.transform(X_valid), _t.transform(X_test)\n"))
		}
	}
	for _, t := range []string{"clf", "reg"} {
		types, est, imp := singleClass, "ExtraTreesClassifier", "from sklearn.ensemble import ExtraTreesClassifier"
		if t == "reg" {
			types, est, imp = []string{regression}, "ExtraTreesRegressor", "from sklearn.ensemble import ExtraTreesRegressor"
		}
		c.add("select-importance-half-"+t, cat, fmt.Sprintf("Keep the more important half of the features, ranked by %s importance (SelectFromModel, threshold median)", est),
			denseMods, types, appendTo("data", imp+"\nfrom sklearn.feature_selection import SelectFromModel\n"+
				fmt.Sprintf(`_t = SelectFromModel(%s(n_estimators=100, random_state=0), threshold="median").fit(X_train, y_train)`, est)+
				"\nX_train, X_valid, X_test = _t.transform(X_train), _t.transform(X_valid), _t.transform(X_test)\n"))
	}
	c.add("log1p-skewed", cat, "Apply log1p to the non-negative features whose training skewness is above 1",
		[]string{tabular}, nil, appendTo("data", asArrays+
			`_skewed = [j for j in range(X_train.shape[1]) if X_train[:, j].min() >= 0 and pd.Series(X_train[:, j]).skew() > 1.0]
for _x in (X_train, X_valid, X_test):
    _x[:, _skewed] = np.log1p(np.clip(_x[:, _skewed], 0, None))
`))
	c.add("row-stats", cat, "Add per-row summary features: the mean, standard deviation, minimum and maximum over all features",
		[]string{tabular, image}, nil, appendTo("data", asArrays+
			`X_train, X_valid, X_test = (np.column_stack([_x, _x.mean(1), _x.std(1), _x.min(1), _x.max(1)]) for _x in (X_train, X_valid, X_test))
`))
	for _, n := range []int{5, 10} {
		c.add(fmt.Sprintf("kbins-%d", n), cat, fmt.Sprintf("Discretise every feature into %d quantile bins, one-hot encoded (KBinsDiscretizer)", n),
			[]string{tabular}, nil, appendTo("data", transform("from sklearn.preprocessing import KBinsDiscretizer",
				fmt.Sprintf(`KBinsDiscretizer(n_bins=%d, encode="onehot-dense", strategy="quantile")`, n))))
	}
	for _, q := range []float64{0.01, 0.05} {
		c.add("clip-"+slug(q), cat, fmt.Sprintf("Clip every feature to its training %g%% and %g%% quantiles to tame outliers", q*100, (1-q)*100),
			[]string{tabular}, nil, appendTo("data", asArrays+
				fmt.Sprintf("_lo, _hi = np.quantile(X_train, %s, axis=0), np.quantile(X_train, %s, axis=0)\n", py(q), py(1-q))+
				"X_train, X_valid, X_test = (np.clip(_x, _lo, _hi) for _x in (X_train, X_valid, X_test))\n"))
	}
	c.add("drop-constant", cat, "Drop the features that are constant on the training split (VarianceThreshold)",
		denseMods, nil, appendTo("data", transform("from sklearn.feature_selection import VarianceThreshold", "VarianceThreshold(0.0)")))
	for _, k := range []int{4, 8, 16} {
		c.add(fmt.Sprintf("kmeans-distances-%d", k), cat, fmt.Sprintf("Add the distances to %d k-means cluster centres (fitted on standardised training features) as features", k),
			denseMods, nil, appendTo("data", "from sklearn.cluster import KMeans\nfrom sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler\n"+
				fmt.Sprintf("_t = make_pipeline(StandardScaler(), KMeans(n_clusters=%d, n_init=4, random_state=0)).fit(X_train)\n", k)+
				"X_train, X_valid, X_test = (np.hstack([np.asarray(_x, dtype=float), _t.transform(_x)]) for _x in (X_train, X_valid, X_test))\n"))
	}
	for _, n := range []int{100, 300} {
		c.add(fmt.Sprintf("nystroem-rbf-%d", n), cat, fmt.Sprintf("Add %d approximate RBF-kernel features (Nystroem on standardised features)", n),
			denseMods, nil, appendTo("data", "from sklearn.kernel_approximation import Nystroem\nfrom sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler\n"+
				fmt.Sprintf("_t = make_pipeline(StandardScaler(), Nystroem(n_components=min(%d, len(X_train)), random_state=0)).fit(X_train)\n", n)+
				"X_train, X_valid, X_test = (np.hstack([np.asarray(_x, dtype=float), _t.transform(_x)]) for _x in (X_train, X_valid, X_test))\n"))
	}
	for _, q := range []float64{0.02, 0.05} {
		c.add("drop-outliers-"+slug(q), cat, fmt.Sprintf("Remove the %g%% most anomalous training rows found by an IsolationForest", q*100),
			[]string{tabular}, nil, appendTo("data", "from sklearn.ensemble import IsolationForest\n"+asArrays+
				fmt.Sprintf("_keep = IsolationForest(contamination=%s, random_state=0).fit_predict(X_train) == 1\n", py(q))+
				"X_train = X_train[_keep]\ny_train = y_train.iloc[_keep] if hasattr(y_train, \"iloc\") else np.asarray(y_train)[_keep]\n"))
	}
	for _, k := range []int{6, 12} {
		c.add(fmt.Sprintf("onehot-low-cardinality-%d", k), cat, fmt.Sprintf("One-hot encode the integer-valued features with 3 to %d distinct values (likely categorical codes)", k),
			[]string{tabular}, nil, appendTo("data", fmt.Sprintf(`_frames = [pd.DataFrame(np.array(_x, dtype=float)) for _x in (X_train, X_valid, X_test)]
_all = pd.concat(_frames, ignore_index=True)
_cat = [c for c in _all.columns if 2 < _all[c].nunique() <= %d and (_all[c] == _all[c].round()).all()]
_all = pd.get_dummies(_all, columns=_cat, dtype=float) if _cat else _all
_n1, _n2 = len(_frames[0]), len(_frames[0]) + len(_frames[1])
X_train, X_valid, X_test = _all.to_numpy()[:_n1], _all.to_numpy()[_n1:_n2], _all.to_numpy()[_n2:]
`, k)))
	}
}

// pixelsOf is the Python that views the raw-pixel columns (the first
// IMG_SIDE**2 columns) of a feature matrix as images.
const pixelsOf = "_imgs = lambda _x: np.asarray(_x, dtype=float)[:, :IMG_SIDE * IMG_SIDE].reshape(-1, IMG_SIDE, IMG_SIDE)\n"

func (c *cat) imageData() {
	const cat = "data"
	img := []string{image}
	c.add("pixels-unit-range", cat, "Divide pixel intensities by their maximum so that they lie in [0, 1]", img, nil,
		appendTo("data", "X_train, X_valid, X_test = (np.asarray(_x, dtype=float) / IMG_MAX for _x in (X_train, X_valid, X_test))\n"))
	shiftFn := `def _shift(imgs, dy, dx):
    out = np.zeros_like(imgs)
    h, w = imgs.shape[1:]
    out[:, max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = imgs[:, max(-dy, 0):h + min(-dy, 0), max(-dx, 0):w + min(-dx, 0)]
    return out


`
	for _, v := range []struct {
		id, text string
		moves    string
	}{
		{"augment-shift-4", "Augment the training images with copies shifted by one pixel up, down, left and right", "[(0, 1), (0, -1), (1, 0), (-1, 0)]"},
		{"augment-shift-8", "Augment the training images with copies shifted by one pixel in all 8 directions", "[(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)]"},
	} {
		c.add(v.id, cat, v.text, img, nil, appendTo("data", shiftFn+pixelsOf+
			"_base = _imgs(X_train)\n"+
			"assert np.shape(X_train)[1] == IMG_SIDE * IMG_SIDE, \"shift augmentation needs raw pixel features only\"\n"+
			fmt.Sprintf("_moves = %s\n", v.moves)+
			"X_train = np.vstack([_base.reshape(len(_base), -1)] + [_shift(_base, dy, dx).reshape(len(_base), -1) for dy, dx in _moves])\n"+
			"y_train = np.concatenate([np.asarray(y_train)] * (1 + len(_moves)))\n"))
	}
	c.add("augment-mirror", cat, "Augment the training images with left-right mirrored copies", img, nil, appendTo("data", pixelsOf+
		"assert np.shape(X_train)[1] == IMG_SIDE * IMG_SIDE, \"mirror augmentation needs raw pixel features only\"\n"+
		"_base = _imgs(X_train)\n"+
		"X_train = np.vstack([_base.reshape(len(_base), -1), _base[:, :, ::-1].reshape(len(_base), -1)])\n"+
		"y_train = np.concatenate([np.asarray(y_train)] * 2)\n"))
	for _, t := range []float64{0.25, 0.5} {
		c.add("binarize-"+slug(t), cat, fmt.Sprintf("Binarise the pixels: 1 where the intensity exceeds %g of the maximum, else 0", t), img, nil,
			appendTo("data", asArrays+fmt.Sprintf("for _x in (X_train, X_valid, X_test):\n    _x[:, :IMG_SIDE * IMG_SIDE] = (_x[:, :IMG_SIDE * IMG_SIDE] > %s * IMG_MAX).astype(float)\n", py(t))))
	}
	c.add("gradient-magnitude", cat, "Add image-gradient magnitude features (per-pixel edge strength from np.gradient)", img, nil,
		appendTo("data", pixelsOf+`def _grad(_x):
    gy, gx = np.gradient(_imgs(_x), axis=(1, 2))
    return np.hypot(gy, gx).reshape(len(gy), -1)


X_train, X_valid, X_test = (np.hstack([np.asarray(_x, dtype=float), _grad(_x)]) for _x in (X_train, X_valid, X_test))
`))
	for _, bins := range []int{4, 8} {
		c.add(fmt.Sprintf("hog-%d", bins), cat, fmt.Sprintf("Add HOG-like features: histograms of gradient orientation (%d bins, magnitude-weighted) over a 2x2 grid of cells", bins), img, nil,
			appendTo("data", pixelsOf+fmt.Sprintf(`def _hog(_x, bins=%d):
    im = _imgs(_x)
    gy, gx = np.gradient(im, axis=(1, 2))
    mag, ang = np.hypot(gy, gx), np.mod(np.arctan2(gy, gx), np.pi)
    b = np.minimum((ang / np.pi * bins).astype(int), bins - 1)
    h = IMG_SIDE // 2
    feats = []
    for r in (slice(0, h), slice(h, IMG_SIDE)):
        for c in (slice(0, h), slice(h, IMG_SIDE)):
            for k in range(bins):
                feats.append((mag[:, r, c] * (b[:, r, c] == k)).sum(axis=(1, 2)))
    return np.column_stack(feats)


X_train, X_valid, X_test = (np.hstack([np.asarray(_x, dtype=float), _hog(_x)]) for _x in (X_train, X_valid, X_test))
`, bins)))
	}
	c.add("row-column-projections", cat, "Add the row sums and column sums of each image (horizontal and vertical projections) as features", img, nil,
		appendTo("data", pixelsOf+"X_train, X_valid, X_test = (np.hstack([np.asarray(_x, dtype=float), _imgs(_x).sum(2), _imgs(_x).sum(1)]) for _x in (X_train, X_valid, X_test))\n"))
	c.add("avg-pool-2x2", cat, "Add a 2x2 average-pooled (half-resolution) copy of each image as extra features", img, nil,
		appendTo("data", pixelsOf+`_pool = lambda _x: _imgs(_x)[:, : IMG_SIDE // 2 * 2, : IMG_SIDE // 2 * 2].reshape(len(_x), IMG_SIDE // 2, 2, IMG_SIDE // 2, 2).mean(axis=(2, 4)).reshape(len(_x), -1)
X_train, X_valid, X_test = (np.hstack([np.asarray(_x, dtype=float), _pool(_x)]) for _x in (X_train, X_valid, X_test))
`))
	c.add("median-filter-3", cat, "Denoise the images with a 3x3 median filter (replaces the pixel values)", img, nil,
		appendTo("data", "from scipy import ndimage\n"+pixelsOf+asArrays+
			"for _x in (X_train, X_valid, X_test):\n    _x[:, :IMG_SIDE * IMG_SIDE] = ndimage.median_filter(_imgs(_x), size=(1, 3, 3)).reshape(len(_x), -1)\n"))
	for _, s := range []float64{0.5, 1.0} {
		c.add("gaussian-blur-"+slug(s), cat, fmt.Sprintf("Smooth the images with a Gaussian blur of sigma %g pixels (replaces the pixel values)", s), img, nil,
			appendTo("data", "from scipy import ndimage\n"+pixelsOf+asArrays+
				fmt.Sprintf("for _x in (X_train, X_valid, X_test):\n    _x[:, :IMG_SIDE * IMG_SIDE] = ndimage.gaussian_filter(_imgs(_x), sigma=(0, %s, %s)).reshape(len(_x), -1)\n", py(s), py(s))))
	}
}

// vectorizerLine matches the text scripts' vectorizer construction.
const vectorizerLine = `(?m)^vectorizer = [^\n]*`

func (c *cat) textData() {
	const cat = "data"
	txt := []string{text}
	setVec := func(imp, ctor string) Op {
		return sub("data", vectorizerLine, imp+"\nvectorizer = "+ctor)
	}
	for _, ng := range []int{1, 2, 3} {
		for _, sublinear := range []bool{false, true} {
			for _, minDF := range []int{1, 2} {
				id := fmt.Sprintf("tfidf-ngram1-%d-mindf%d", ng, minDF)
				text := fmt.Sprintf("Use TF-IDF features of word 1- to %d-grams", ng)
				if ng == 1 {
					text = "Use TF-IDF features of single words"
				}
				if minDF > 1 {
					text += fmt.Sprintf(" seen in at least %d documents", minDF)
				}
				if sublinear {
					id += "-sublinear"
					text += ", with sublinear (log) term frequency"
				}
				c.add(id, cat, text+" instead of the capped word counts", txt, nil, setVec("from sklearn.feature_extraction.text import TfidfVectorizer",
					fmt.Sprintf("TfidfVectorizer(ngram_range=(1, %d), min_df=%d, sublinear_tf=%s)", ng, minDF, py(sublinear))))
			}
		}
	}
	for _, ng := range []int{1, 2} {
		c.add(fmt.Sprintf("counts-all-words-ngram1-%d", ng), cat, fmt.Sprintf("Count all word 1- to %d-grams instead of only the most frequent words (no max_features cap)", ng), txt, nil,
			setVec("from sklearn.feature_extraction.text import CountVectorizer", fmt.Sprintf("CountVectorizer(ngram_range=(1, %d))", ng)))
		c.add(fmt.Sprintf("binary-all-words-ngram1-%d", ng), cat, fmt.Sprintf("Use binary presence features of all word 1- to %d-grams (no max_features cap)", ng), txt, nil,
			setVec("from sklearn.feature_extraction.text import CountVectorizer", fmt.Sprintf("CountVectorizer(ngram_range=(1, %d), binary=True)", ng)))
	}
	for _, r := range [][2]int{{2, 4}, {2, 5}, {3, 5}} {
		c.add(fmt.Sprintf("tfidf-char-%d-%d", r[0], r[1]), cat, fmt.Sprintf("Use TF-IDF features of character %d- to %d-grams within word boundaries", r[0], r[1]), txt, nil,
			setVec("from sklearn.feature_extraction.text import TfidfVectorizer", fmt.Sprintf(`TfidfVectorizer(analyzer="char_wb", ngram_range=(%d, %d), sublinear_tf=True)`, r[0], r[1])))
	}
	c.add("tfidf-words-and-chars", cat, "Combine word 1-2-gram and character 2-5-gram TF-IDF features in one FeatureUnion", txt, nil,
		setVec("from sklearn.feature_extraction.text import TfidfVectorizer\nfrom sklearn.pipeline import make_union",
			`make_union(TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True), TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True))`))
	for _, ng := range []int{1, 2} {
		c.add(fmt.Sprintf("tfidf-stopwords-ngram1-%d", ng), cat, fmt.Sprintf("Use TF-IDF of word 1- to %d-grams with English stop words removed", ng), txt, nil,
			setVec("from sklearn.feature_extraction.text import TfidfVectorizer", fmt.Sprintf(`TfidfVectorizer(ngram_range=(1, %d), stop_words="english", sublinear_tf=True)`, ng)))
	}
	for _, bits := range []int{16, 18} {
		c.add(fmt.Sprintf("hashing-2pow%d", bits), cat, fmt.Sprintf("Use a HashingVectorizer of word 1-2-grams with 2**%d non-negative features (no vocabulary)", bits), txt, nil,
			setVec("from sklearn.feature_extraction.text import HashingVectorizer", fmt.Sprintf("HashingVectorizer(ngram_range=(1, 2), n_features=2**%d, alternate_sign=False)", bits)))
	}
	for _, k := range []int{50, 100, 200} {
		c.add(fmt.Sprintf("svd-%d", k), cat, fmt.Sprintf("Reduce the text features to %d dense latent dimensions with TruncatedSVD (LSA)", k), txt, nil,
			appendTo("data", "from sklearn.decomposition import TruncatedSVD\n"+
				fmt.Sprintf("_t = TruncatedSVD(n_components=max(1, min(%d, X_train.shape[1] - 1)), random_state=0).fit(X_train)\n", k)+
				"X_train, X_valid, X_test = _t.transform(X_train), _t.transform(X_valid), _t.transform(X_test)\n"))
	}
	c.add("text-length-features", cat, "Add each document's character and word counts (scaled) as two extra features", txt, nil,
		appendTo("data", `from scipy import sparse
_len = lambda _df: sparse.csr_matrix(np.column_stack([_df["text"].str.len() / 100.0, _df["text"].str.split().str.len() / 20.0]))
X_train, X_valid, X_test = (sparse.hstack([_x, _len(_df)]).tocsr() for _x, _df in ((X_train, train), (X_valid, valid), (X_test, test)))
`))
	c.add("l2-normalize-rows", cat, "L2-normalise each document's feature vector (Normalizer)", txt, nil,
		appendTo("data", transform("from sklearn.preprocessing import Normalizer", "Normalizer()")))
	c.add("mark-negations", cat, "Mark negations before vectorising: join 'not' and 'no' to the next word (\"not good\" becomes the token not_good)", txt, nil,
		sub("data", vectorizerLine, `for _df in (train, valid, test):
    _df["text"] = _df["text"].str.replace(r"\b(not|no|never) (\w+)", r"\1_\2", regex=True)
$0`))
}

func (c *cat) timeSeriesData() {
	const cat = "data"
	ts := []string{timeSeries}
	for _, k := range []int{1, 2, 3, 4, 6} {
		c.add(fmt.Sprintf("fourier-%d", k), cat, fmt.Sprintf("Add %d pairs of Fourier terms (sin and cos of the seasonal phase, harmonics 1 to %d) as seasonal features", k, k), ts, nil,
			appendTo("data", fmt.Sprintf(`for _X in (X_train, X_valid, X_test):
    for _k in range(1, %d + 1):
        _X["sin_%%d" %% _k] = np.sin(2 * np.pi * _k * _X["t"] / PERIOD)
        _X["cos_%%d" %% _k] = np.cos(2 * np.pi * _k * _X["t"] / PERIOD)
`, k)))
	}
	for _, d := range []int{2, 3} {
		c.add(fmt.Sprintf("poly-trend-%d", d), cat, fmt.Sprintf("Add polynomial trend terms up to degree %d of the (rescaled) time index", d), ts, nil,
			appendTo("data", fmt.Sprintf(`_tscale = float(X_train["t"].max())
for _X in (X_train, X_valid, X_test):
    for _d in range(2, %d + 1):
        _X["t_pow%%d" %% _d] = (_X["t"] / _tscale) ** _d
`, d)))
	}
	for _, b := range []int{4, 12} {
		c.add(fmt.Sprintf("season-phase-onehot-%d", b), cat, fmt.Sprintf("Add one-hot indicators of the position within the season, in %d equal phase bins", b), ts, nil,
			appendTo("data", fmt.Sprintf(`for _X in (X_train, X_valid, X_test):
    _phase = np.floor((_X["t"] %% PERIOD) / PERIOD * %d)
    for _b in range(%d):
        _X["phase_%%d" %% _b] = (_phase == _b).astype(float)
`, b, b)))
	}
	for _, m := range []int{1, 2, 3} {
		text := "Add the value one whole number of seasons earlier (at least HORIZON steps back, so it is known for every forecast) as a lag feature"
		if m > 1 {
			text = fmt.Sprintf("Add the mean of the %d most recent season-aligned past values that are at least HORIZON steps back as a lag feature", m)
		}
		c.add(fmt.Sprintf("seasonal-lag-%d", m), cat, text, ts, nil, appendTo("data", fmt.Sprintf(`_seasons = int(np.ceil(HORIZON / PERIOD))
_lags = [int(round(PERIOD * (_seasons + _j))) for _j in range(%d)]
_known = history.reindex(np.arange(int(history.index.min()), int(history.index.max()) + 1)).interpolate(limit_direction="both")
for _X in (X_train, X_valid, X_test):
    _vals = [_known.reindex(_X["t"].astype(int).to_numpy() - _l).to_numpy() for _l in _lags]
    _X["seasonal_lag"] = pd.Series(np.nanmean(np.vstack(_vals), axis=0), index=_X.index).bfill().fillna(float(_known.iloc[0]))
`, m)))
	}
	c.add("interpolate-missing", cat, "Fill missing training values by linear interpolation instead of dropping those rows", ts, nil,
		sub("data", `train = train\.dropna\(subset=\[TARGET\]\)`, `train = train.assign(**{TARGET: train[TARGET].interpolate(limit_direction="both")})`))
	c.add("ffill-missing", cat, "Fill missing training values with the last observed value (forward fill) instead of dropping those rows", ts, nil,
		sub("data", `train = train\.dropna\(subset=\[TARGET\]\)`, `train = train.assign(**{TARGET: train[TARGET].ffill().bfill()})`))
	for _, f := range []float64{0.5, 0.25} {
		c.add("recent-window-"+slug(f), cat, fmt.Sprintf("Train only on the most recent %g%% of the training history", f*100), ts, nil,
			appendTo("data", fmt.Sprintf("_keep = (X_train[\"t\"] >= X_train[\"t\"].quantile(1 - %s)).to_numpy()\nX_train, y_train = X_train[_keep], y_train[_keep]\n", py(f))))
	}
}

// graphReslice re-derives the split matrices from the node features F.
const graphReslice = "X_train, X_valid, X_test = F[idx_train], F[idx_valid], F[idx_test]\n"

// rowNorm is the Python for the row-normalised adjacency (mean over neighbours).
const rowNorm = "_P = sparse.diags(1.0 / np.maximum(np.asarray(A.sum(1)).ravel(), 1)) @ A\n"

// symNorm is the GCN normalisation D^-1/2 (A + I) D^-1/2.
const symNorm = `_Ah = A + sparse.eye(n_nodes)
_d = 1.0 / np.sqrt(np.asarray(_Ah.sum(1)).ravel())
_S = sparse.diags(_d) @ _Ah @ sparse.diags(_d)
`

// knownLabels builds the one-hot matrix of training labels (zero rows elsewhere).
const knownLabels = `_classes = np.unique(np.asarray(y_train))
_Y = np.zeros((n_nodes, len(_classes)))
_Y[idx_train, np.searchsorted(_classes, np.asarray(y_train))] = 1.0
`

func (c *cat) graphData() {
	const cat = "data"
	g := []string{graph}
	for _, k := range []int{1, 2, 3} {
		text := "Append the mean of each node's neighbours' features (one hop)"
		if k > 1 {
			text = fmt.Sprintf("Append neighbour-mean features for 1 to %d hops (repeated mean over neighbours)", k)
		}
		c.add(fmt.Sprintf("neighbor-mean-%dhop", k), cat, text, g, nil, appendTo("data", rowNorm+fmt.Sprintf(`_H, _feats = F, [F]
for _ in range(%d):
    _H = _P @ _H
    _feats.append(_H)
F = np.hstack(_feats)
`, k)+graphReslice))
	}
	for _, k := range []int{2, 3} {
		c.add(fmt.Sprintf("sgc-propagate-%d", k), cat, fmt.Sprintf("Replace node features by %d rounds of GCN-normalised propagation over the graph with self-loops (SGC)", k), g, nil,
			appendTo("data", symNorm+fmt.Sprintf("for _ in range(%d):\n    F = _S @ F\n", k)+graphReslice))
	}
	c.add("degree-feature", cat, "Append each node's log degree as a feature", g, nil,
		appendTo("data", "F = np.hstack([F, np.log1p(np.asarray(A.sum(1)))])\n"+graphReslice))
	c.add("neighbor-label-fractions", cat, "Append, per class, the fraction of each node's labelled training neighbours that have that class", g, nil,
		appendTo("data", knownLabels+"_cnt = A @ _Y\nF = np.hstack([F, _cnt / np.maximum(_cnt.sum(1, keepdims=True), 1)])\n"+graphReslice))
	c.add("two-hop-label-fractions", cat, "Append, per class, the fraction of each node's labelled two-hop neighbours (excluding itself) that have that class", g, nil,
		appendTo("data", knownLabels+"_A2 = (A @ A).tolil()\n_A2.setdiag(0)\n_cnt = _A2.tocsr() @ _Y\nF = np.hstack([F, _cnt / np.maximum(_cnt.sum(1, keepdims=True), 1)])\n"+graphReslice))
	for _, a := range []float64{0.5, 0.9} {
		c.add("label-propagation-"+slug(a), cat, fmt.Sprintf("Append label-propagation scores: spread the training labels over the graph for 10 rounds with restart weight %g, then average over neighbours", 1-a), g, nil,
			appendTo("data", knownLabels+rowNorm+fmt.Sprintf("_Z = _Y.copy()\nfor _ in range(10):\n    _Z = %s * (_P @ _Z) + %s * _Y\nF = np.hstack([F, _P @ _Z])\n", py(a), py(1-a))+graphReslice))
	}
	for _, k := range []int{8, 16} {
		c.add(fmt.Sprintf("spectral-embedding-%d", k), cat, fmt.Sprintf("Append a %d-dimensional spectral embedding of the graph (top eigenvectors of the normalised adjacency)", k), g, nil,
			appendTo("data", "from scipy.sparse.linalg import eigsh\n"+symNorm+fmt.Sprintf("_vals, _vecs = eigsh(_S, k=%d, which=\"LA\", v0=np.ones(n_nodes))\nF = np.hstack([F, _vecs * np.sqrt(n_nodes)])\n", k)+graphReslice))
	}
}

// ---------------------------------------------------------------- model

func (c *cat) model(id, text string, mods, types []string, imp, ctor string) {
	c.add(id, "model", text, mods, types, replace("model", imp+"\nmodel = "+ctor+"\n"))
}

func (c *cat) classifierModels() {
	m, t := denseMods, singleClass
	const lr = "from sklearn.linear_model import LogisticRegression"
	for _, C := range []float64{0.01, 0.1, 1, 10, 100} {
		c.model("logreg-c"+slug(C), fmt.Sprintf("Use logistic regression with C=%g (max_iter=2000)", C), m, t, lr, fmt.Sprintf("LogisticRegression(C=%s, max_iter=2000)", py(C)))
	}
	for _, C := range []float64{0.1, 1} {
		c.model("logreg-l1-c"+slug(C), fmt.Sprintf("Use L1-regularised (sparse) logistic regression with C=%g", C), m, t, lr, fmt.Sprintf(`LogisticRegression(penalty="l1", C=%s, solver="liblinear", max_iter=2000)`, py(C)))
	}
	for _, n := range []int{100, 300} {
		for _, d := range []any{nil, 8} {
			c.model(fmt.Sprintf("random-forest-n%d-d%s", n, slug(d)), fmt.Sprintf("Use a random forest classifier with %d trees and max_depth=%s", n, py(d)), m, t,
				"from sklearn.ensemble import RandomForestClassifier", fmt.Sprintf("RandomForestClassifier(n_estimators=%d, max_depth=%s, n_jobs=1, random_state=0)", n, py(d)))
		}
	}
	for _, n := range []int{200, 500} {
		c.model(fmt.Sprintf("extra-trees-n%d", n), fmt.Sprintf("Use an extremely randomised trees classifier (ExtraTrees) with %d trees", n), m, t,
			"from sklearn.ensemble import ExtraTreesClassifier", fmt.Sprintf("ExtraTreesClassifier(n_estimators=%d, random_state=0)", n))
	}
	for _, n := range []int{100, 300} {
		for _, l := range []float64{0.05, 0.1} {
			c.model(fmt.Sprintf("gradient-boosting-n%d-lr%s", n, slug(l)), fmt.Sprintf("Use gradient boosting (GradientBoostingClassifier) with %d trees of depth 3 and learning_rate=%g", n, l), m, t,
				"from sklearn.ensemble import GradientBoostingClassifier", fmt.Sprintf("GradientBoostingClassifier(n_estimators=%d, learning_rate=%s, max_depth=3, random_state=0)", n, py(l)))
			c.model(fmt.Sprintf("hist-gradient-boosting-i%d-lr%s", n, slug(l)), fmt.Sprintf("Use histogram gradient boosting (HistGradientBoostingClassifier) with max_iter=%d and learning_rate=%g", n, l), m, t,
				"from sklearn.ensemble import HistGradientBoostingClassifier", fmt.Sprintf("HistGradientBoostingClassifier(max_iter=%d, learning_rate=%s, random_state=0)", n, py(l)))
		}
	}
	for _, C := range []float64{1, 10, 100} {
		c.model("svc-rbf-c"+slug(C), fmt.Sprintf("Use an RBF-kernel support vector classifier (SVC) with C=%g and probability estimates", C), m, t,
			"from sklearn.svm import SVC", fmt.Sprintf(`SVC(C=%s, kernel="rbf", gamma="scale", probability=True, random_state=0)`, py(C)))
	}
	c.model("svc-poly3", "Use a degree-3 polynomial-kernel SVC with probability estimates", m, t, "from sklearn.svm import SVC", `SVC(C=1.0, kernel="poly", degree=3, probability=True, random_state=0)`)
	for _, C := range []float64{0.1, 1} {
		c.model("linear-svc-c"+slug(C), fmt.Sprintf("Use a linear SVM (LinearSVC, C=%g) with sigmoid-calibrated probabilities", C), m, t,
			"from sklearn.calibration import CalibratedClassifierCV\nfrom sklearn.svm import LinearSVC", fmt.Sprintf("CalibratedClassifierCV(LinearSVC(C=%s, max_iter=5000), cv=3)", py(C)))
	}
	for _, k := range []int{5, 15, 31} {
		c.model(fmt.Sprintf("knn-k%d", k), fmt.Sprintf("Use k-nearest neighbours with k=%d and distance weighting", k), m, t,
			"from sklearn.neighbors import KNeighborsClassifier", fmt.Sprintf(`KNeighborsClassifier(n_neighbors=%d, weights="distance")`, k))
	}
	for _, h := range []struct {
		id, layers string
		alpha      float64
	}{{"64", "(64,)", 1e-4}, {"128-64", "(128, 64)", 1e-4}, {"64-alpha0p01", "(64,)", 1e-2}} {
		c.model("mlp-"+h.id, fmt.Sprintf("Use a multilayer perceptron (MLPClassifier) with hidden layers %s, alpha=%g and max_iter=500", h.layers, h.alpha), m, t,
			"from sklearn.neural_network import MLPClassifier", fmt.Sprintf("MLPClassifier(hidden_layer_sizes=%s, alpha=%s, max_iter=500, random_state=0)", h.layers, py(h.alpha)))
	}
	c.model("lda", "Use linear discriminant analysis (LinearDiscriminantAnalysis)", m, t, "from sklearn.discriminant_analysis import LinearDiscriminantAnalysis", "LinearDiscriminantAnalysis()")
	c.model("lda-shrinkage", "Use linear discriminant analysis with automatic Ledoit-Wolf shrinkage", m, t, "from sklearn.discriminant_analysis import LinearDiscriminantAnalysis", `LinearDiscriminantAnalysis(solver="lsqr", shrinkage="auto")`)
	c.model("qda-reg", "Use quadratic discriminant analysis with reg_param=0.1", m, t, "from sklearn.discriminant_analysis import QuadraticDiscriminantAnalysis", "QuadraticDiscriminantAnalysis(reg_param=0.1)")
	c.model("gaussian-nb", "Use Gaussian naive Bayes", m, t, "from sklearn.naive_bayes import GaussianNB", "GaussianNB()")
	for _, d := range []int{5, 10} {
		c.model(fmt.Sprintf("decision-tree-d%d", d), fmt.Sprintf("Use a single decision tree classifier with max_depth=%d", d), m, t,
			"from sklearn.tree import DecisionTreeClassifier", fmt.Sprintf("DecisionTreeClassifier(max_depth=%d, random_state=0)", d))
	}
	for _, n := range []int{100, 300} {
		c.model(fmt.Sprintf("adaboost-n%d", n), fmt.Sprintf("Use AdaBoost with %d decision stumps", n), m, t,
			"from sklearn.ensemble import AdaBoostClassifier", fmt.Sprintf("AdaBoostClassifier(n_estimators=%d, random_state=0)", n))
	}
	for _, loss := range []string{"log_loss", "modified_huber"} {
		c.model("sgd-"+strings.ReplaceAll(loss, "_", "-"), fmt.Sprintf("Use a linear classifier trained by SGD with loss=%q on standardised features", loss), m, t,
			"from sklearn.linear_model import SGDClassifier\nfrom sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler",
			fmt.Sprintf(`make_pipeline(StandardScaler(), SGDClassifier(loss=%q, alpha=1e-4, max_iter=2000, random_state=0))`, loss))
	}
	c.model("ridge-classifier", "Use a ridge classifier (RidgeClassifier) with sigmoid-calibrated probabilities", m, t,
		"from sklearn.calibration import CalibratedClassifierCV\nfrom sklearn.linear_model import RidgeClassifier", "CalibratedClassifierCV(RidgeClassifier(alpha=1.0), cv=3)")
	c.model("scaled-logreg", "Use logistic regression on standardised features (a StandardScaler + LogisticRegression pipeline)", m, t,
		"from sklearn.linear_model import LogisticRegression\nfrom sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler", "make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))")
	c.model("scaled-svc", "Use an RBF SVC on standardised features (a StandardScaler + SVC pipeline, C=10)", m, t,
		"from sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler\nfrom sklearn.svm import SVC", `make_pipeline(StandardScaler(), SVC(C=10.0, gamma="scale", probability=True, random_state=0))`)
	c.model("scaled-knn", "Use 15-nearest neighbours on standardised features (a StandardScaler + KNeighborsClassifier pipeline)", m, t,
		"from sklearn.neighbors import KNeighborsClassifier\nfrom sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler", `make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=15, weights="distance"))`)
}

func (c *cat) textModels() {
	m, t := []string{text}, singleClass
	for _, C := range []float64{1, 10, 100} {
		c.model("text-logreg-c"+slug(C), fmt.Sprintf("Use logistic regression with C=%g on the sparse text features", C), m, t,
			"from sklearn.linear_model import LogisticRegression", fmt.Sprintf("LogisticRegression(C=%s, max_iter=3000)", py(C)))
	}
	for _, C := range []float64{0.1, 1, 10} {
		c.model("text-linear-svc-c"+slug(C), fmt.Sprintf("Use a linear SVM (LinearSVC, C=%g) with sigmoid-calibrated probabilities on the text features", C), m, t,
			"from sklearn.calibration import CalibratedClassifierCV\nfrom sklearn.svm import LinearSVC", fmt.Sprintf("CalibratedClassifierCV(LinearSVC(C=%s, max_iter=5000), cv=3)", py(C)))
	}
	for _, a := range []float64{0.1, 0.5, 1} {
		c.model("multinomial-nb-alpha"+slug(a), fmt.Sprintf("Use multinomial naive Bayes with alpha=%g", a), m, t, "from sklearn.naive_bayes import MultinomialNB", fmt.Sprintf("MultinomialNB(alpha=%s)", py(a)))
	}
	for _, a := range []float64{0.3, 1} {
		c.model("complement-nb-alpha"+slug(a), fmt.Sprintf("Use complement naive Bayes (good for imbalanced text classes) with alpha=%g", a), m, t, "from sklearn.naive_bayes import ComplementNB", fmt.Sprintf("ComplementNB(alpha=%s)", py(a)))
	}
	for _, loss := range []string{"log_loss", "modified_huber"} {
		for _, a := range []float64{1e-4, 1e-5} {
			c.model(fmt.Sprintf("text-sgd-%s-alpha%s", strings.ReplaceAll(loss, "_", "-"), slug(a)), fmt.Sprintf("Use an SGD linear classifier with loss=%q and alpha=%g on the text features", loss, a), m, t,
				"from sklearn.linear_model import SGDClassifier", fmt.Sprintf("SGDClassifier(loss=%q, alpha=%s, max_iter=50, tol=None, random_state=0)", loss, py(a)))
		}
	}
	c.model("text-ridge-classifier", "Use a ridge classifier with sigmoid-calibrated probabilities on the text features", m, t,
		"from sklearn.calibration import CalibratedClassifierCV\nfrom sklearn.linear_model import RidgeClassifier", "CalibratedClassifierCV(RidgeClassifier(alpha=1.0), cv=3)")
	c.model("text-passive-aggressive", "Use a passive-aggressive linear classifier with sigmoid-calibrated probabilities on the text features", m, t,
		"from sklearn.calibration import CalibratedClassifierCV\nfrom sklearn.linear_model import PassiveAggressiveClassifier", "CalibratedClassifierCV(PassiveAggressiveClassifier(C=0.1, max_iter=1000, random_state=0), cv=3)")
	c.model("text-knn-cosine", "Use 15-nearest neighbours with cosine distance on the text features", m, t,
		"from sklearn.neighbors import KNeighborsClassifier", `KNeighborsClassifier(n_neighbors=15, metric="cosine", weights="distance")`)
}

func (c *cat) regressorModels() {
	m, t := []string{tabular, timeSeries}, regTypes
	for _, a := range []float64{0.1, 1, 10, 100} {
		c.model("ridge-alpha"+slug(a), fmt.Sprintf("Use ridge regression with alpha=%g", a), m, t, "from sklearn.linear_model import Ridge", fmt.Sprintf("Ridge(alpha=%s)", py(a)))
	}
	for _, a := range []float64{0.01, 0.1, 1} {
		c.model("lasso-alpha"+slug(a), fmt.Sprintf("Use lasso regression (L1) with alpha=%g", a), m, t, "from sklearn.linear_model import Lasso", fmt.Sprintf("Lasso(alpha=%s, max_iter=10000)", py(a)))
	}
	for _, r := range []float64{0.2, 0.8} {
		c.model("elastic-net-l1r"+slug(r), fmt.Sprintf("Use elastic-net regression with alpha=0.1 and l1_ratio=%g", r), m, t, "from sklearn.linear_model import ElasticNet", fmt.Sprintf("ElasticNet(alpha=0.1, l1_ratio=%s, max_iter=10000)", py(r)))
	}
	c.model("huber", "Use robust Huber regression (HuberRegressor) on standardised features", m, t,
		"from sklearn.linear_model import HuberRegressor\nfrom sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler", "make_pipeline(StandardScaler(), HuberRegressor(max_iter=1000))")
	c.model("linear-regression", "Use ordinary least-squares linear regression", m, t, "from sklearn.linear_model import LinearRegression", "LinearRegression()")
	for _, n := range []int{100, 300} {
		for _, d := range []any{nil, 8} {
			c.model(fmt.Sprintf("random-forest-reg-n%d-d%s", n, slug(d)), fmt.Sprintf("Use a random forest regressor with %d trees and max_depth=%s", n, py(d)), m, t,
				"from sklearn.ensemble import RandomForestRegressor", fmt.Sprintf("RandomForestRegressor(n_estimators=%d, max_depth=%s, random_state=0)", n, py(d)))
		}
	}
	for _, n := range []int{200, 500} {
		c.model(fmt.Sprintf("extra-trees-reg-n%d", n), fmt.Sprintf("Use an extremely randomised trees regressor (ExtraTrees) with %d trees", n), m, t,
			"from sklearn.ensemble import ExtraTreesRegressor", fmt.Sprintf("ExtraTreesRegressor(n_estimators=%d, random_state=0)", n))
	}
	for _, n := range []int{100, 300} {
		for _, l := range []float64{0.05, 0.1} {
			c.model(fmt.Sprintf("gradient-boosting-reg-n%d-lr%s", n, slug(l)), fmt.Sprintf("Use gradient boosting (GradientBoostingRegressor) with %d trees of depth 3 and learning_rate=%g", n, l), m, t,
				"from sklearn.ensemble import GradientBoostingRegressor", fmt.Sprintf("GradientBoostingRegressor(n_estimators=%d, learning_rate=%s, max_depth=3, random_state=0)", n, py(l)))
			c.model(fmt.Sprintf("hist-gradient-boosting-reg-i%d-lr%s", n, slug(l)), fmt.Sprintf("Use histogram gradient boosting (HistGradientBoostingRegressor) with max_iter=%d and learning_rate=%g", n, l), m, t,
				"from sklearn.ensemble import HistGradientBoostingRegressor", fmt.Sprintf("HistGradientBoostingRegressor(max_iter=%d, learning_rate=%s, random_state=0)", n, py(l)))
		}
	}
	for _, loss := range []string{"absolute_error", "huber"} {
		c.model("gradient-boosting-reg-"+strings.ReplaceAll(loss, "_", "-"), fmt.Sprintf("Use gradient boosting regression with the robust %q loss (200 trees, learning_rate=0.05)", loss), m, t,
			"from sklearn.ensemble import GradientBoostingRegressor", fmt.Sprintf("GradientBoostingRegressor(loss=%q, n_estimators=200, learning_rate=0.05, max_depth=3, random_state=0)", loss))
	}
	c.model("hist-gradient-boosting-reg-absolute-error", "Use histogram gradient boosting with the absolute-error loss (predicts conditional medians; suits MAE)", m, t,
		"from sklearn.ensemble import HistGradientBoostingRegressor", `HistGradientBoostingRegressor(loss="absolute_error", max_iter=200, learning_rate=0.05, random_state=0)`)
	c.model("hist-gradient-boosting-poisson", "Use histogram gradient boosting with a Poisson loss (for non-negative count-like targets)", m, t,
		"from sklearn.ensemble import HistGradientBoostingRegressor", `HistGradientBoostingRegressor(loss="poisson", max_iter=200, learning_rate=0.05, random_state=0)`)
	for _, a := range []float64{1e-4, 1} {
		c.model("poisson-glm-alpha"+slug(a), fmt.Sprintf("Use a Poisson generalised linear model (PoissonRegressor, alpha=%g) on standardised features", a), m, t,
			"from sklearn.linear_model import PoissonRegressor\nfrom sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler", fmt.Sprintf("make_pipeline(StandardScaler(), PoissonRegressor(alpha=%s, max_iter=1000))", py(a)))
	}
	for _, C := range []float64{1, 10, 100} {
		c.model("svr-c"+slug(C), fmt.Sprintf("Use an RBF support vector regressor (SVR) with C=%g on standardised features", C), m, t,
			"from sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler\nfrom sklearn.svm import SVR", fmt.Sprintf(`make_pipeline(StandardScaler(), SVR(C=%s, gamma="scale"))`, py(C)))
	}
	for _, k := range []int{5, 15} {
		c.model(fmt.Sprintf("knn-reg-k%d", k), fmt.Sprintf("Use k-nearest-neighbour regression with k=%d on standardised features", k), m, t,
			"from sklearn.neighbors import KNeighborsRegressor\nfrom sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler", fmt.Sprintf(`make_pipeline(StandardScaler(), KNeighborsRegressor(n_neighbors=%d, weights="distance"))`, k))
	}
	for _, h := range []struct{ id, layers string }{{"64", "(64,)"}, {"128-64", "(128, 64)"}} {
		c.model("mlp-reg-"+h.id, fmt.Sprintf("Use a multilayer perceptron regressor with hidden layers %s on standardised features (max_iter=1000)", h.layers), m, t,
			"from sklearn.neural_network import MLPRegressor\nfrom sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler", fmt.Sprintf("make_pipeline(StandardScaler(), MLPRegressor(hidden_layer_sizes=%s, max_iter=1000, random_state=0))", h.layers))
	}
	c.model("kernel-ridge-rbf", "Use RBF kernel ridge regression on standardised features", m, t,
		"from sklearn.kernel_ridge import KernelRidge\nfrom sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler", `make_pipeline(StandardScaler(), KernelRidge(alpha=1.0, kernel="rbf"))`)
	for _, d := range []int{4, 8} {
		c.model(fmt.Sprintf("decision-tree-reg-d%d", d), fmt.Sprintf("Use a single regression tree with max_depth=%d", d), m, t,
			"from sklearn.tree import DecisionTreeRegressor", fmt.Sprintf("DecisionTreeRegressor(max_depth=%d, random_state=0)", d))
	}
	c.model("adaboost-reg", "Use AdaBoost regression over depth-3 trees (100 estimators)", m, t,
		"from sklearn.ensemble import AdaBoostRegressor\nfrom sklearn.tree import DecisionTreeRegressor", "AdaBoostRegressor(DecisionTreeRegressor(max_depth=3), n_estimators=100, random_state=0)")
}

func (c *cat) multilabelModels() {
	m, t := []string{tabular}, []string{multilabel}
	const ovr = "from sklearn.multiclass import OneVsRestClassifier"
	for _, C := range []float64{0.1, 1, 10} {
		c.model("ml-ovr-logreg-c"+slug(C), fmt.Sprintf("Use one logistic regression per label (OneVsRestClassifier) with C=%g", C), m, t,
			ovr+"\nfrom sklearn.linear_model import LogisticRegression", fmt.Sprintf("OneVsRestClassifier(LogisticRegression(C=%s, max_iter=2000))", py(C)))
	}
	for _, n := range []int{200, 500} {
		c.model(fmt.Sprintf("ml-random-forest-n%d", n), fmt.Sprintf("Use a multi-output random forest classifier with %d trees (one forest predicts every label)", n), m, t,
			"from sklearn.ensemble import RandomForestClassifier", fmt.Sprintf("RandomForestClassifier(n_estimators=%d, max_depth=None, random_state=0)", n))
	}
	c.model("ml-extra-trees", "Use a multi-output ExtraTrees classifier with 300 trees", m, t, "from sklearn.ensemble import ExtraTreesClassifier", "ExtraTreesClassifier(n_estimators=300, random_state=0)")
	for _, k := range []int{5, 15} {
		c.model(fmt.Sprintf("ml-knn-k%d", k), fmt.Sprintf("Use multi-label k-nearest neighbours with k=%d", k), m, t, "from sklearn.neighbors import KNeighborsClassifier", fmt.Sprintf("KNeighborsClassifier(n_neighbors=%d)", k))
	}
	c.model("ml-mlp", "Use a multi-label multilayer perceptron (MLPClassifier, hidden layer 128, max_iter=500)", m, t,
		"from sklearn.neural_network import MLPClassifier", "MLPClassifier(hidden_layer_sizes=(128,), alpha=1e-4, max_iter=500, random_state=0)")
	c.model("ml-ovr-hist-gradient-boosting", "Use one histogram gradient boosting classifier per label (OneVsRestClassifier, max_iter=200)", m, t,
		ovr+"\nfrom sklearn.ensemble import HistGradientBoostingClassifier", "OneVsRestClassifier(HistGradientBoostingClassifier(max_iter=200, learning_rate=0.1, random_state=0))")
	c.model("ml-classifier-chain", "Use a classifier chain of logistic regressions (each label also sees the previous labels' predictions)", m, t,
		"from sklearn.linear_model import LogisticRegression\nfrom sklearn.multioutput import ClassifierChain", "ClassifierChain(LogisticRegression(C=1.0, max_iter=2000), order=\"random\", random_state=0)")
	c.model("ml-ovr-svc", "Use one RBF SVC per label (OneVsRestClassifier, C=10) on standardised features", m, t,
		ovr+"\nfrom sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler\nfrom sklearn.svm import SVC", `OneVsRestClassifier(make_pipeline(StandardScaler(), SVC(C=10.0, gamma="scale")))`)
	c.model("ml-ovr-gradient-boosting", "Use one gradient boosting classifier per label (MultiOutputClassifier, 100 trees)", m, t,
		"from sklearn.ensemble import GradientBoostingClassifier\nfrom sklearn.multioutput import MultiOutputClassifier", "MultiOutputClassifier(GradientBoostingClassifier(n_estimators=100, random_state=0))")
}

// ---------------------------------------------------------------- learning

// hyperparameters are learning ideas that change one hyperparameter of the
// current model with a sub op on the model section: the op fails, and so the
// edit is rejected, when the current model has no such parameter.
func (c *cat) hyperparameters() {
	const cat = "learning"
	// Tree and boosting hyperparameters have no model to act on in text
	// tasks (whose model ideas are sparse linear models and naive Bayes).
	nonText := []string{tabular, image, graph, timeSeries}
	hp := func(id, text, pattern, repl string, types []string) {
		mods := []string(nil)
		for _, p := range []string{"n_estimators", "learning_rate", "max_depth", "min_samples_leaf", "max_features", "HistGradient", "GradientBoosting", "subsample", "MLP"} {
			if strings.Contains(id+pattern+repl, p) {
				mods = nonText
			}
		}
		c.add(id, cat, text, mods, types, sub("model", pattern, repl))
	}
	for _, n := range []int{50, 200, 500, 1000} {
		hp(fmt.Sprintf("n-estimators-%d", n), fmt.Sprintf("Set the ensemble's number of estimators to n_estimators=%d", n), `\bn_estimators=\d+`, fmt.Sprintf("n_estimators=%d", n), nil)
	}
	for _, n := range []int{500, 2000, 5000} {
		hp(fmt.Sprintf("max-iter-%d", n), fmt.Sprintf("Raise the iteration budget to max_iter=%d so that the optimiser (or booster) can converge", n), `\bmax_iter=\d+`, fmt.Sprintf("max_iter=%d", n), nil)
	}
	for _, l := range []float64{0.03, 0.1, 0.3} {
		hp("learning-rate-"+slug(l), fmt.Sprintf("Set the boosting learning rate to learning_rate=%g", l), `\blearning_rate=[0-9.e-]+`, "learning_rate="+py(l), nil)
	}
	for _, C := range []float64{0.1, 1, 10, 100} {
		hp("c-"+slug(C), fmt.Sprintf("Change the regularisation strength to C=%g (larger C means weaker regularisation)", C), `\bC=[0-9.e-]+`, "C="+py(C), nil)
	}
	for _, a := range []float64{1e-4, 1e-2, 1, 10} {
		hp("alpha-"+slug(a), fmt.Sprintf("Change the regularisation/smoothing parameter to alpha=%g", a), `\balpha=[0-9.e-]+`, "alpha="+py(a), nil)
	}
	for _, d := range []any{3, 6, 12, nil} {
		hp("max-depth-"+slug(d), fmt.Sprintf("Change the tree depth limit to max_depth=%s", py(d)), `\bmax_depth=(\d+|None)`, "max_depth="+py(d), nil)
	}
	for _, k := range []int{5, 10, 25} {
		hp(fmt.Sprintf("n-neighbors-%d", k), fmt.Sprintf("Change the number of neighbours to n_neighbors=%d", k), `\bn_neighbors=\d+`, fmt.Sprintf("n_neighbors=%d", k), nil)
	}
	const trees = `\b((?:RandomForest|ExtraTrees|DecisionTree|GradientBoosting)(?:Classifier|Regressor))\(`
	for _, l := range []int{2, 5, 10} {
		hp(fmt.Sprintf("min-samples-leaf-%d", l), fmt.Sprintf("Regularise the trees with min_samples_leaf=%d", l), trees, fmt.Sprintf("${1}(min_samples_leaf=%d, ", l), nil)
	}
	for _, f := range []any{"sqrt", 0.5} {
		hp("max-features-"+slug(f), fmt.Sprintf("Decorrelate the trees by considering max_features=%s candidate features per split", py(f)),
			`\b((?:RandomForest|ExtraTrees)(?:Classifier|Regressor))\(`, fmt.Sprintf("${1}(max_features=%s, ", py(f)), nil)
	}
	hp("class-weight-balanced", "Weight classes inversely to their frequency (class_weight='balanced')",
		`\b(LogisticRegression|RandomForestClassifier|ExtraTreesClassifier|SVC|LinearSVC|DecisionTreeClassifier|RidgeClassifier|SGDClassifier|PassiveAggressiveClassifier)\(`,
		`${1}(class_weight="balanced", `, singleClass)
	hp("early-stopping-hgb", "Enable early stopping in histogram gradient boosting (15% validation fraction, patience 20)",
		`\b(HistGradientBoosting(?:Classifier|Regressor))\(`, "${1}(early_stopping=True, validation_fraction=0.15, n_iter_no_change=20, ", nil)
	hp("early-stopping-gb", "Enable early stopping in gradient boosting (n_iter_no_change=10 on a 15% validation fraction)",
		`\b(GradientBoosting(?:Classifier|Regressor))\(`, "${1}(n_iter_no_change=10, validation_fraction=0.15, ", nil)
	hp("early-stopping-mlp", "Enable early stopping in the neural network (10% validation fraction)",
		`\b(MLP(?:Classifier|Regressor))\(`, "${1}(early_stopping=True, validation_fraction=0.1, ", nil)
	for _, s := range []float64{0.5, 0.8} {
		hp("subsample-"+slug(s), fmt.Sprintf("Use stochastic gradient boosting: fit each tree on a random subsample=%g of the rows", s),
			`\b(GradientBoosting(?:Classifier|Regressor))\(`, fmt.Sprintf("${1}(subsample=%s, ", py(s)), nil)
	}
}

// stackHelper stacks train and valid splits of any of the scripts' types.
const stackHelper = `from scipy import sparse as _sp
from sklearn.base import clone


def _stack(a, b):
    if _sp.issparse(a):
        return _sp.vstack([a, b]).tocsr()
    if hasattr(a, "iloc") and hasattr(b, "iloc"):
        return pd.concat([a, b])
    return np.concatenate([np.asarray(a), np.asarray(b)])


`

// tuneHelper picks the model's main hyperparameter for a CV search.
const tuneHelper = `_grids = {"C": [0.01, 0.1, 1, 10, 100], "alpha": [1e-4, 1e-3, 1e-2, 0.1, 1, 10], "n_neighbors": [3, 5, 11, 21],
          "max_depth": [3, 5, 8, None], "learning_rate": [0.03, 0.1, 0.3]}
_params = model.get_params()
_name = next((k for g in _grids for k in _params if k.split("__")[-1] == g and not isinstance(_params[k], str)), None)
if _name is None:
    raise ValueError("no hyperparameter to tune: the model has none of C, alpha, n_neighbors, max_depth, learning_rate")
`

// needsSampleWeight, placed just before the weighted fit, refuses with a
// clear message a model whose fit takes no sample_weight (k-NN, pipelines)
// instead of letting the fit fail obscurely.
const needsSampleWeight = `import inspect

if "sample_weight" not in inspect.signature(model.fit).parameters:
    raise ValueError("sample weights need a model whose fit takes sample_weight; %s does not" % type(model).__name__)
`

func (c *cat) trainingProcedures() {
	const cat = "learning"
	wrap := func(id, text string, mods, types []string, code string) {
		c.add(id, cat, text, mods, types, prependTo("training", code))
	}
	all := []string(nil)
	c.add("refit-train-valid", cat, "After validating, refit a copy of the model on train plus validation data and use it for the test predictions",
		all, nil, appendTo("training", stackHelper+"final_model = clone(model).fit(_stack(X_train, X_valid), _stack(y_train, y_valid))\n"))
	for _, n := range []int{10, 25} {
		wrap(fmt.Sprintf("bagging-%d", n), fmt.Sprintf("Bag the model: average %d copies fitted on bootstrap samples (BaggingClassifier)", n), nil, singleClass,
			fmt.Sprintf("from sklearn.ensemble import BaggingClassifier\nmodel = BaggingClassifier(model, n_estimators=%d, random_state=0)\n", n))
		wrap(fmt.Sprintf("bagging-reg-%d", n), fmt.Sprintf("Bag the regressor: average %d copies fitted on bootstrap samples (BaggingRegressor)", n), nil, regTypes,
			fmt.Sprintf("from sklearn.ensemble import BaggingRegressor\nmodel = BaggingRegressor(model, n_estimators=%d, random_state=0)\n", n))
	}
	for _, s := range []struct{ id, name, imp, ctor string }{
		{"hgb", "histogram gradient boosting", "from sklearn.ensemble import HistGradientBoostingClassifier", "HistGradientBoostingClassifier(random_state=0)"},
		{"rf", "a 300-tree random forest", "from sklearn.ensemble import RandomForestClassifier", "RandomForestClassifier(n_estimators=300, random_state=0)"},
		{"logreg", "a scaled logistic regression", "from sklearn.linear_model import LogisticRegression\nfrom sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler", "make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))"},
		{"knn", "a scaled 15-nearest-neighbour classifier", "from sklearn.neighbors import KNeighborsClassifier\nfrom sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler", `make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=15, weights="distance"))`},
	} {
		wrap("soft-voting-"+s.id, fmt.Sprintf("Ensemble the model with %s by soft voting (averaged class probabilities)", s.name), denseMods, singleClass,
			s.imp+"\nfrom sklearn.ensemble import VotingClassifier\n"+fmt.Sprintf(`model = VotingClassifier([("base", model), ("second", %s)], voting="soft")`, s.ctor)+"\n")
	}
	for _, s := range []struct{ id, name, imp, ctor string }{
		{"logreg", "a logistic regression (C=10)", "from sklearn.linear_model import LogisticRegression", "LogisticRegression(C=10.0, max_iter=3000)"},
		{"cnb", "complement naive Bayes", "from sklearn.naive_bayes import ComplementNB", "ComplementNB(alpha=0.3)"},
	} {
		wrap("text-soft-voting-"+s.id, fmt.Sprintf("Ensemble the text model with %s by soft voting (averaged class probabilities)", s.name), []string{text}, singleClass,
			s.imp+"\nfrom sklearn.ensemble import VotingClassifier\n"+fmt.Sprintf(`model = VotingClassifier([("base", model), ("second", %s)], voting="soft")`, s.ctor)+"\n")
	}
	for _, s := range []struct{ id, name, imp, ctor string }{
		{"hgb", "histogram gradient boosting", "from sklearn.ensemble import HistGradientBoostingRegressor", "HistGradientBoostingRegressor(random_state=0)"},
		{"rf", "a 300-tree random forest", "from sklearn.ensemble import RandomForestRegressor", "RandomForestRegressor(n_estimators=300, random_state=0)"},
		{"ridge", "a scaled ridge regression", "from sklearn.linear_model import Ridge\nfrom sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler", "make_pipeline(StandardScaler(), Ridge(alpha=1.0))"},
	} {
		wrap("averaging-"+s.id, fmt.Sprintf("Average the regressor's predictions with those of %s (VotingRegressor)", s.name), []string{tabular, timeSeries}, regTypes,
			s.imp+"\nfrom sklearn.ensemble import VotingRegressor\n"+fmt.Sprintf(`model = VotingRegressor([("base", model), ("second", %s)])`, s.ctor)+"\n")
	}
	wrap("stacking-rf-logreg", "Stack the model with a random forest under a logistic-regression meta-learner (StackingClassifier, 5-fold)", denseMods, singleClass,
		"from sklearn.ensemble import RandomForestClassifier, StackingClassifier\nfrom sklearn.linear_model import LogisticRegression\n"+
			`model = StackingClassifier([("base", model), ("rf", RandomForestClassifier(n_estimators=200, random_state=0))], final_estimator=LogisticRegression(max_iter=2000), cv=5)`+"\n")
	wrap("stacking-rf-ridge", "Stack the regressor with a random forest under a ridge meta-learner (StackingRegressor, 5-fold)", []string{tabular}, []string{regression},
		"from sklearn.ensemble import RandomForestRegressor, StackingRegressor\nfrom sklearn.linear_model import RidgeCV\n"+
			`model = StackingRegressor([("base", model), ("rf", RandomForestRegressor(n_estimators=200, random_state=0))], final_estimator=RidgeCV(), cv=5)`+"\n")
	for _, cv := range []int{3, 5} {
		wrap(fmt.Sprintf("grid-search-cv%d", cv), fmt.Sprintf("Tune the model's main hyperparameter (C, alpha, n_neighbors, max_depth or learning_rate) by %d-fold cross-validated grid search", cv),
			[]string{tabular, image, text, graph}, nil, "from sklearn.model_selection import GridSearchCV\n"+tuneHelper+fmt.Sprintf("model = GridSearchCV(model, {_name: _grids[_name.split(\"__\")[-1]]}, cv=%d)\n", cv))
	}
	wrap("grid-search-time-series-cv", "Tune the model's main hyperparameter (C, alpha, n_neighbors, max_depth or learning_rate) by grid search over 5 forward-chaining time-series folds",
		[]string{timeSeries}, nil, "from sklearn.model_selection import GridSearchCV, TimeSeriesSplit\n"+tuneHelper+"model = GridSearchCV(model, {_name: _grids[_name.split(\"__\")[-1]]}, cv=TimeSeriesSplit(5))\n")
	for _, n := range []int{3, 5} {
		wrap(fmt.Sprintf("seed-averaging-%d", n), fmt.Sprintf("Average %d copies of the model trained with different random seeds (soft voting)", n), denseMods, singleClass,
			"from sklearn.base import clone\nfrom sklearn.ensemble import VotingClassifier\n"+
				"if \"random_state\" not in model.get_params():\n    raise ValueError(\"seed averaging needs a model with a random_state parameter\")\n"+
				fmt.Sprintf("model = VotingClassifier([(\"seed%%d\" %% _s, clone(model).set_params(random_state=_s)) for _s in range(%d)], voting=\"soft\")\n", n))
		wrap(fmt.Sprintf("seed-averaging-reg-%d", n), fmt.Sprintf("Average %d copies of the regressor trained with different random seeds", n), []string{tabular, timeSeries}, regTypes,
			"from sklearn.base import clone\nfrom sklearn.ensemble import VotingRegressor\n"+
				"if \"random_state\" not in model.get_params():\n    raise ValueError(\"seed averaging needs a model with a random_state parameter\")\n"+
				fmt.Sprintf("model = VotingRegressor([(\"seed%%d\" %% _s, clone(model).set_params(random_state=_s)) for _s in range(%d)])\n", n))
	}
	wrap("one-vs-rest", "Train one binary model per class (OneVsRestClassifier) instead of a single multiclass model", nil, []string{multiclass},
		"from sklearn.multiclass import OneVsRestClassifier\nmodel = OneVsRestClassifier(model)\n")
	for _, m := range []string{"sigmoid", "isotonic"} {
		wrap("calibrate-"+m, fmt.Sprintf("Calibrate the predicted probabilities with %s calibration (CalibratedClassifierCV, 3-fold)", m), nil, singleClass,
			fmt.Sprintf("from sklearn.calibration import CalibratedClassifierCV\nmodel = CalibratedClassifierCV(model, method=%q, cv=3)\n", m))
	}
	wrap("scale-in-pipeline", "Fit the model inside a pipeline that first standardises the features (StandardScaler)", []string{tabular, image, graph, timeSeries}, nil,
		"from sklearn.pipeline import make_pipeline\nfrom sklearn.preprocessing import StandardScaler\nmodel = make_pipeline(StandardScaler(), model)\n")
	c.add("balanced-sample-weights", cat, "Fit with balanced per-sample weights so every class contributes equally to the loss", nil, singleClass,
		sub("training", `(?m)^model\.fit\(X_train, y_train\)`, needsSampleWeight+"from sklearn.utils.class_weight import compute_sample_weight\n\nmodel.fit(X_train, y_train, sample_weight=compute_sample_weight(\"balanced\", y_train))"))
	for _, hl := range []int{2, 5} {
		c.add(fmt.Sprintf("recency-weights-%dseasons", hl), cat, fmt.Sprintf("Weight training rows by recency: the weight halves every %d seasons back in time", hl), []string{timeSeries}, nil,
			sub("training", `(?m)^model\.fit\(X_train, y_train\)`, needsSampleWeight+fmt.Sprintf(`model.fit(X_train, y_train, sample_weight=0.5 ** ((X_train["t"].max() - X_train["t"]) / (%d * PERIOD)))`, hl)))
	}
	const ttr = "from sklearn.compose import TransformedTargetRegressor\n"
	wrap("target-log1p", "Fit the regressor on log1p of the (non-negative) target and invert with expm1 (TransformedTargetRegressor)", []string{tabular, timeSeries}, regTypes,
		ttr+"model = TransformedTargetRegressor(regressor=model, func=np.log1p, inverse_func=np.expm1)\n")
	wrap("target-standardize", "Standardise the target before fitting the regressor (TransformedTargetRegressor with StandardScaler)", []string{tabular, timeSeries}, regTypes,
		ttr+"from sklearn.preprocessing import StandardScaler\nmodel = TransformedTargetRegressor(regressor=model, transformer=StandardScaler())\n")
	wrap("target-quantile", "Fit the regressor on a normal-quantile transform of the target (TransformedTargetRegressor with QuantileTransformer)", []string{tabular}, []string{regression},
		ttr+"from sklearn.preprocessing import QuantileTransformer\nmodel = TransformedTargetRegressor(regressor=model, transformer=QuantileTransformer(n_quantiles=min(200, len(X_train)), output_distribution=\"normal\"))\n")
	for _, d := range []int{1, 2} {
		name := "linear"
		if d == 2 {
			name = "quadratic"
		}
		wrap("trend-plus-residual-"+name, fmt.Sprintf("Fit a %s trend in time first and train the model on the residuals (so that trees need not extrapolate the trend)", name), []string{timeSeries}, []string{forecast},
			fmt.Sprintf(`from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.linear_model import LinearRegression


class TrendPlusResidual(BaseEstimator, RegressorMixin):
    """A polynomial trend in t plus residual_model fitted on what the trend leaves."""

    def __init__(self, residual_model=None, degree=%d):
        self.residual_model = residual_model
        self.degree = degree

    def _trend_features(self, X):
        t = np.asarray(X["t"], dtype=float) / self.t_scale_
        return np.column_stack([t ** d for d in range(1, self.degree + 1)])

    def fit(self, X, y):
        self.t_scale_ = float(np.max(np.abs(X["t"]))) or 1.0
        self.trend_ = LinearRegression().fit(self._trend_features(X), y)
        self.model_ = clone(self.residual_model).fit(X, np.asarray(y) - self.trend_.predict(self._trend_features(X)))
        return self

    def predict(self, X):
        return self.trend_.predict(self._trend_features(X)) + self.model_.predict(X)


model = TrendPlusResidual(model)
`, d))
	}
}
