package catalog

// All returns every catalog idea, in a stable order.
// TODO(task suite): the full catalog of a few hundred parameterised ideas.
func All() []Idea {
	return builtin
}

var builtin = []Idea{
	{
		ID: "data/standard-scaler", Category: "data", Modalities: []string{"tabular"},
		Text: "Standardise the numeric features with StandardScaler fitted on the training split",
		Edit: Edit{Ops: []Op{{Section: "data", Op: "append", Code: "from sklearn.preprocessing import StandardScaler\n_sc = StandardScaler().fit(X_train)\nX_train, X_valid, X_test = _sc.transform(X_train), _sc.transform(X_valid), _sc.transform(X_test)"}}},
	},
}
