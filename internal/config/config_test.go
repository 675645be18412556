package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

type llmConfig struct {
	BaseURL string        `yaml:"base_url" help:"API base URL"`
	Timeout time.Duration `yaml:"timeout" help:"per-request timeout"`
}

type common struct {
	Data string `yaml:"data" help:"data root"`
}

type testConfig struct {
	common   `yaml:",inline"`
	Steps    int           `yaml:"steps" help:"number of steps"`
	Seed     int64         `yaml:"seed" help:"random seed"`
	Workers  int32         `yaml:"workers" help:"parallel workers"`
	LR       float64       `yaml:"lr" help:"learning rate"`
	Clip     float32       `yaml:"clip" help:"clip coefficient"`
	Verbose  bool          `yaml:"verbose" help:"log more"`
	Budget   time.Duration `yaml:"budget" help:"wall-clock budget"`
	Tasks    []string      `yaml:"tasks" help:"task ids (empty: all)"`
	Sizes    []int         `yaml:"sizes" help:"layer sizes"`
	Weights  []float64     `yaml:"weights" help:"mixture weights"`
	LLM      llmConfig     `yaml:"llm" help:"the language model"`
	Derived  int           `yaml:"-"`
	internal int
}

func defaults() testConfig {
	return testConfig{
		common: common{Data: "./data"}, Steps: 10, Seed: 1, Workers: 2, LR: 3e-4, Clip: 0.2,
		Budget: time.Minute, Tasks: []string{"a"}, Sizes: []int{64, 64}, Weights: []float64{0.5, 0.5},
		LLM: llmConfig{BaseURL: "http://localhost:8000/v1", Timeout: 30 * time.Second},
	}
}

func (c *testConfig) Derive() { c.Derived = c.Steps * 2 }

func (c *testConfig) Validate() error {
	if c.Steps <= 0 {
		return errors.New("steps must be positive")
	}
	return nil
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cfg.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func resolve(t *testing.T, yamlText string, args ...string) (testConfig, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	bound := defaults()
	Bind(fs, &bound)
	if err := fs.Parse(args); err != nil {
		return testConfig{}, err
	}
	path := ""
	if yamlText != "" {
		path = writeFile(t, yamlText)
	}
	return Resolve(fs, path, defaults)
}

func TestResolvePrecedence(t *testing.T) {
	cases := []struct {
		name  string
		yaml  string
		args  []string
		check func(c testConfig) string // "" when fine
	}{
		{"defaults", "", nil, func(c testConfig) string {
			want := defaults()
			want.Derived = 20
			if !reflect.DeepEqual(c, want) {
				return "not the defaults"
			}
			return ""
		}},
		{"yaml over defaults", "steps: 7\nllm:\n  timeout: 2m\nbudget: 90s\ntasks: [x, y]\nsizes: [1, 2, 3]\ndata: gs://b/p\n", nil, func(c testConfig) string {
			if c.Steps != 7 || c.LLM.Timeout != 2*time.Minute || c.Budget != 90*time.Second || strings.Join(c.Tasks, ",") != "x,y" ||
				!reflect.DeepEqual(c.Sizes, []int{1, 2, 3}) || c.Data != "gs://b/p" {
				return "yaml values not applied"
			}
			if c.LLM.BaseURL != "http://localhost:8000/v1" || c.LR != 3e-4 || c.Seed != 1 {
				return "unset keys lost their defaults"
			}
			if c.Derived != 14 {
				return "Derive not run after loading"
			}
			return ""
		}},
		{"flags over yaml", "steps: 7\nllm:\n  base_url: http://yaml\nlr: 0.1\n",
			[]string{"--steps=9", "--llm.base_url=http://flag", "--tasks=p,q", "--budget=5s", "--clip=0.3", "--workers=8", "--weights=0.25,0.75", "--verbose", "--data=/x"},
			func(c testConfig) string {
				if c.Steps != 9 || c.LLM.BaseURL != "http://flag" || strings.Join(c.Tasks, ",") != "p,q" || c.Budget != 5*time.Second ||
					c.Clip != 0.3 || c.Workers != 8 || !reflect.DeepEqual(c.Weights, []float64{0.25, 0.75}) || !c.Verbose || c.Data != "/x" {
					return "flag values not applied"
				}
				if c.LR != 0.1 {
					return "a yaml value not overridden by a flag was lost"
				}
				return ""
			}},
		{"flag equal to the default still overrides yaml", "steps: 7\n", []string{"--steps=10"}, func(c testConfig) string {
			if c.Steps != 10 {
				return "flag set to the default value did not override yaml"
			}
			return ""
		}},
		{"empty file", "# nothing\n", nil, func(c testConfig) string {
			if c.Steps != 10 {
				return "empty file changed values"
			}
			return ""
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := resolve(t, c.yaml, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			if msg := c.check(got); msg != "" {
				t.Errorf("%s: got %+v", msg, got)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		args []string
		want []string
	}{
		{"unknown key", "steps: 3\nstesp: 4\n", nil, []string{"cfg.yaml", "line 2", `unknown key "stesp"`, "steps"}},
		{"unknown nested key", "llm:\n  base_url: x\n  base_ulr: y\n", nil, []string{"line 3", `unknown key "llm.base_ulr"`, "under llm", "base_url, timeout"}},
		{"excluded field", "derived: 3\n", nil, []string{`unknown key "derived"`}},
		{"bad type", "steps: many\n", nil, []string{"cfg.yaml", "many"}},
		{"bad duration", "budget: forever\n", nil, []string{"cfg.yaml", "forever"}},
		{"not a mapping", "- a\n- b\n", nil, []string{"cfg.yaml", "want a mapping", "list"}},
		{"validation", "steps: 0\n", nil, []string{"cfg.yaml", "steps must be positive"}},
		{"validation from flags", "", []string{"--steps=-1"}, []string{"steps must be positive"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := resolve(t, c.yaml, c.args...)
			if err == nil {
				t.Fatalf("got nil want an error saying %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	if _, err := Resolve(pflag.NewFlagSet("x", pflag.ContinueOnError), "/no/such/file.yaml", defaults); err == nil || !strings.Contains(err.Error(), "/no/such/file.yaml") {
		t.Errorf("missing file: got %v want an error naming it", err)
	}
}

func TestBindFlags(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	c := defaults()
	Bind(fs, &c)
	cases := []struct{ flag, def, help string }{
		{"steps", "10", "number of steps"},
		{"llm.base_url", "http://localhost:8000/v1", "API base URL"},
		{"llm.timeout", "30s", "per-request timeout"},
		{"data", "./data", "data root"},
		{"tasks", "[a]", "task ids (empty: all)"},
	}
	for _, cc := range cases {
		f := fs.Lookup(cc.flag)
		if f == nil {
			t.Errorf("flag --%s missing", cc.flag)
			continue
		}
		if f.DefValue != cc.def || f.Usage != cc.help {
			t.Errorf("--%s: got default %q help %q want %q, %q", cc.flag, f.DefValue, f.Usage, cc.def, cc.help)
		}
	}
	for _, absent := range []string{"derived", "internal", "common.data"} {
		if fs.Lookup(absent) != nil {
			t.Errorf("flag --%s should not exist", absent)
		}
	}
}

func TestYAMLRoundTripsWithComments(t *testing.T) {
	c := defaults()
	c.Steps, c.LLM.Timeout, c.Tasks = 42, 3*time.Second, []string{"t1", "t2"}
	out := YAML(c)
	for _, w := range []string{"steps: 42 # number of steps", "# the language model\nllm:", "timeout: 3s # per-request timeout", "data: ./data # data root"} {
		if !strings.Contains(out, w) {
			t.Errorf("YAML output lacks %q:\n%s", w, out)
		}
	}
	var back testConfig
	back = defaults()
	back.Steps = 0
	if err := LoadFile(writeFile(t, out), &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, c) {
		t.Errorf("round trip: got %+v want %+v", back, c)
	}
}
