package train

import "testing"

// validateCase is one config edit and the whole message it must give
// ("" for valid).
type validateCase[C any] struct {
	name string
	edit func(*C)
	want string
}

func checkValidate[C interface{ Validate() error }](t *testing.T, base func() C, cases []validateCase[C]) {
	t.Helper()
	for _, c := range cases {
		cfg := base()
		c.edit(&cfg)
		got := ""
		if err := cfg.Validate(); err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s: got %q want %q", c.name, got, c.want)
		}
	}
}

func TestModelConfigValidate(t *testing.T) {
	base := func() ModelConfig { c := DemoModelConfig(); c.Vocab = 100; return c }
	checkValidate(t, base, []validateCase[ModelConfig]{
		{"demo", func(*ModelConfig) {}, ""},
		{"d_model", func(c *ModelConfig) { c.DModel = 0 }, "d_model 0: must be positive"},
		{"heads", func(c *ModelConfig) { c.Heads = -1 }, "heads -1: must be positive"},
		{"heads divide", func(c *ModelConfig) { c.Heads = 3 }, "heads 3: must divide d_model (256)"},
		{"layers", func(c *ModelConfig) { c.Layers = 0 }, "layers 0: must be positive"},
		{"ctx", func(c *ModelConfig) { c.Ctx = 0 }, "ctx 0: must be positive"},
		{"ffn", func(c *ModelConfig) { c.FFN = -1 }, "ffn -1: must not be negative (0: 4*d_model)"},
		{"vocab", func(c *ModelConfig) { c.Vocab = 2 }, "vocab 2: must be at least 4 (the special tokens)"},
	})
}
