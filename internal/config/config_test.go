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
		return Errorf("steps", c.Steps, "must be positive")
	}
	if c.LLM.Timeout < 0 {
		return Nest("llm", Errorf("timeout", c.LLM.Timeout, "must not be negative"))
	}
	if strings.HasPrefix(c.LLM.BaseURL, "ftp:") {
		return Nest("llm", Errorf("base_url", c.LLM.BaseURL, "want an http:// or https:// URL"))
	}
	if c.Clip > 1 {
		return errors.New("clip above 1")
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
		{"validation", "steps: 0\n", nil, []string{"cfg.yaml line 1: steps 0: must be positive"}},
		{"validation from flags", "", []string{"--steps=-1"}, []string{"--steps -1: must be positive"}},
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

// TestLoadFileMessages pins the whole message of every kind of bad file:
// each names the file, the line at fault and, for a bad value, the dotted
// key.
func TestLoadFileMessages(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"string for an int", "steps: 3\nseed: five\n", `line 2: seed "five": want an integer`},
		{"float for an int", "steps: 2.5\n", `line 1: steps "2.5": want an integer`},
		{"nested duration", "llm:\n  base_url: x\n  timeout: 30\n", `line 3: llm.timeout "30": want a duration such as 90s, 30m or 1h30m`},
		{"bad duration", "budget: forever\n", `line 1: budget "forever": want a duration such as 90s, 30m or 1h30m`},
		{"bool", "verbose: maybe\n", `line 1: verbose "maybe": want true or false`},
		{"32-bit overflow", "workers: 99999999999\n", `line 1: workers "99999999999": want a 32-bit integer`},
		{"scalar for a list", "tasks: a\n", `line 1: tasks "a": want a list of strings, got a single value`},
		{"bad list item", "sizes: [1, x]\n", `line 1: sizes: want a list of integers`},
		{"float in an int list", "sizes: [1, 2.5]\n", `line 1: sizes: want a list of integers`},
		{"list for a number", "lr: [1]\n", `line 1: lr: want a number, got a list`},
		{"mapping for a string", "data:\n  x: 1\n", `line 1: data: want a string, got a mapping`},
		{"scalar for a section", "llm: fast\n", `line 1: llm: want a mapping of key: value, got a single value`},
		{"no value", "steps:\n", `line 1: steps: no value: want an integer (leave the key out to keep the default)`},
		{"unknown key", "steps: 3\nstesp: 4\n", `line 2: unknown key "stesp" (valid keys: data, steps, seed, workers, lr, clip, verbose, budget, tasks, sizes, weights, llm; see --print-config)`},
		{"kebab key", "llm:\n  base-url: x\n", `line 2: unknown key "llm.base-url" (valid keys under llm: base_url, timeout; YAML keys are snake_case: llm.base_url; see --print-config)`},
		{"repeated key", "steps: 3\nseed: 2\nsteps: 4\n", `line 3: key "steps" is set twice (first on line 1)`},
		{"not a mapping", "- a\n- b\n", `line 1: want a mapping of key: value, got a list`},
		// Syntax errors: yaml.v3 alone says line 1, 1, 3, 1, 1 and 3 for
		// these; the line at fault is the one quoted.
		{"missing colon", "steps: 3\nseed 2\nlr: 0.1\n", `line 2: could not find expected ':' (in "seed 2")`},
		{"unclosed list", "steps: 3\ntasks: [a, b\nlr: 0.1\n", `line 2: did not find expected ',' or ']' (in "tasks: [a, b")`},
		{"unclosed mapping", "steps: 3\nllm: {base_url: x\nlr: 0.1\n", `line 2: did not find expected ',' or '}' (in "llm: {base_url: x")`},
		{"dedented key", "steps: 3\nllm:\n  base_url: x\n timeout: 5s\n", `line 4: did not find expected key (in "timeout: 5s")`},
		{"key after a list", "tasks:\n  - a\n  steps: 3\n", `line 3: did not find expected '-' indicator (in "steps: 3")`},
		{"deep dedent", "llm:\n  base_url: x\n  timeout: 5s\n verbose: true\n", `line 4: did not find expected key (in "verbose: true")`},
		{"unclosed quote", "steps: 3\ndata: \"x\nlr: 0.1\n", `line 2: found unexpected end of stream (in "data: \"x")`},
		{"tab", "steps: 3\n\tseed: 2\n", `line 2: found a tab character that violates indentation (in "seed: 2")`},
		{"first line", "steps: 3: 4\n", `line 1: mapping values are not allowed in this context (in "steps: 3: 4")`},
		{"last line unclosed", "steps: 3\nseed: 2\ntasks: [\n", `line 3: did not find expected node content (in "tasks: [")`},
		{"multi-line list before the error", "tasks: [a,\n  b]\nseed 2\n", `line 3: could not find expected ':' (in "seed 2")`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, c.yaml)
			cfg := defaults()
			err := LoadFile(path, &cfg)
			want := "config " + path + " " + c.want
			if err == nil || err.Error() != want {
				t.Errorf("got  %v\nwant %s", err, want)
			}
			if !reflect.DeepEqual(cfg.Sizes, defaults().Sizes) {
				t.Errorf("a failed decode changed sizes to %v", cfg.Sizes)
			}
		})
	}
}

// TestValidateNamesTheSource checks that a Validate error names the key
// as the user set it: the flag as typed, the file and line, or the bare
// key for a default.
func TestValidateNamesTheSource(t *testing.T) {
	cases := []struct {
		name, yaml string
		args       []string
		want       string // "%s" is the file
	}{
		{"flag", "", []string{"--steps=-1"}, "--steps -1: must be positive"},
		{"flag over the file", "steps: 4\n", []string{"--steps=0"}, "--steps 0: must be positive"},
		{"file", "seed: 2\nsteps: 0\n", nil, "config %s line 2: steps 0: must be positive"},
		{"nested file", "llm:\n  timeout: -5s\n", nil, "config %s line 2: llm.timeout -5s: must not be negative"},
		{"nested flag", "", []string{"--llm.timeout=-1m"}, "--llm.timeout -1m0s: must not be negative"},
		{"kebab flag", "", []string{"--llm.base-url=ftp://x"}, `--llm.base-url "ftp://x": want an http:// or https:// URL`},
		{"snake flag", "", []string{"--llm.base_url=ftp://x"}, `--llm.base_url "ftp://x": want an http:// or https:// URL`},
		{"plain error", "clip: 2\n", nil, "config %s: clip above 1"},
		{"plain error from a flag", "", []string{"--clip=2"}, "config: clip above 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			bound := defaults()
			Bind(fs, &bound)
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			path := ""
			if c.yaml != "" {
				path = writeFile(t, c.yaml)
			}
			_, err := Resolve(fs, path, defaults)
			want := c.want
			if strings.Contains(want, "%s") {
				want = strings.Replace(want, "%s", path, 1)
			}
			if err == nil || err.Error() != want {
				t.Errorf("got  %v\nwant %s", err, want)
			}
		})
	}
	// A default that fails names the bare key.
	bad := func() testConfig { c := defaults(); c.Steps = 0; return c }
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	b := bad()
	Bind(fs, &b)
	var fe *FieldError
	if _, err := Resolve(fs, "", bad); !errors.As(err, &fe) || err.Error() != "steps 0: must be positive" {
		t.Errorf("default: got %v want steps 0: must be positive (a *FieldError)", err)
	}
}

func TestKebabAliases(t *testing.T) {
	type cfgT struct {
		PerTask int           `yaml:"per_task" help:"trajectories per task"`
		Only    []string      `yaml:"only" help:"task ids"`
		Warm    bool          `yaml:"warm_start" help:"start warm"`
		LLM     llmConfig     `yaml:"llm"`
		Wait    time.Duration `yaml:"max_wait" help:"wait"`
	}
	def := func() cfgT { return cfgT{PerTask: 20, Warm: false} }
	for _, args := range [][]string{
		{"--per-task=5", "--warm-start", "--llm.base-url=http://x", "--max-wait=3s", "--only=a,b"},
		{"--per_task=5", "--warm_start", "--llm.base_url=http://x", "--max_wait=3s", "--only=a,b"},
		{"--per-task", "5", "--warm-start=true", "--llm.base_url", "http://x", "--max-wait", "3s", "--only", "a", "--only", "b"},
	} {
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		bound := def()
		Bind(fs, &bound)
		if err := fs.Parse(args); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		got, err := Resolve(fs, "", def)
		if err != nil {
			t.Fatal(err)
		}
		want := cfgT{PerTask: 5, Only: []string{"a", "b"}, Warm: true, LLM: llmConfig{BaseURL: "http://x"}, Wait: 3 * time.Second}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%v: got %+v want %+v", args, got, want)
		}
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	bound := def()
	Bind(fs, &bound)
	if f := fs.Lookup("per-task"); f == nil || !f.Hidden {
		t.Errorf("--per-task: got %+v want a hidden alias", f)
	}
	if strings.Contains(fs.FlagUsages(), "per-task") || !strings.Contains(fs.FlagUsages(), "--per_task") {
		t.Errorf("help lists the alias or lacks the flag:\n%s", fs.FlagUsages())
	}
}

func TestYAMLListComments(t *testing.T) {
	c := defaults()
	c.Tasks = nil
	out := YAML(c)
	for _, w := range []string{"tasks: [] # task ids (empty: all)\nsizes: [64, 64] # layer sizes\n", "# the language model\nllm:\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("YAML output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(Canonical(c), "#") {
		t.Errorf("Canonical has comments:\n%s", Canonical(c))
	}
}

// pathsConfig has a path the config file gives relative to its folder,
// nested and inline like a stage's, beside an untagged one.
type pathsConfig struct {
	Root  string `yaml:"root" path:"from-config" help:"a folder"`
	Plain string `yaml:"plain" help:"not a path"`
	Sub   struct {
		Dir string `yaml:"dir" path:"from-config" help:"a nested folder"`
	} `yaml:"sub"`
}

// TestPathsFromConfig: a relative path tagged path:"from-config" in a
// config file is taken from the file's folder whatever the working
// directory; absolute paths, URLs, untagged keys and defaults are kept as
// they are; a flag is taken as typed and wins over the file.
func TestPathsFromConfig(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "runs", "r1")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(sub, "r1.yaml")
	def := func() pathsConfig { c := pathsConfig{Root: "./default", Plain: "p"}; c.Sub.Dir = "./d"; return c }
	run := func(yamlText string, args ...string) pathsConfig {
		t.Helper()
		if err := os.WriteFile(path, []byte(yamlText), 0o644); err != nil {
			t.Fatal(err)
		}
		fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
		bound := def()
		Bind(fs, &bound)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		// A relative --config path, from another working directory.
		t.Chdir(dir)
		c, err := Resolve(fs, filepath.Join("runs", "r1", "r1.yaml"), def)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := run("root: ../../data/r1\nplain: ../x\nsub:\n  dir: out\n")
	if want := filepath.Join(dir, "data", "r1"); c.Root != want {
		t.Errorf("root %q, want %q (from the file's folder)", c.Root, want)
	}
	if want := filepath.Join(sub, "out"); c.Sub.Dir != want {
		t.Errorf("sub.dir %q, want %q", c.Sub.Dir, want)
	}
	if c.Plain != "../x" {
		t.Errorf("untagged plain %q changed", c.Plain)
	}
	c = run("plain: y\n")
	if c.Root != "./default" || c.Sub.Dir != "./d" {
		t.Errorf("defaults changed to %q, %q though the file does not set them", c.Root, c.Sub.Dir)
	}
	for _, v := range []string{"/abs/data", "gs://bucket/prefix", "file:///tmp/d"} {
		if c = run("root: " + v + "\n"); c.Root != v {
			t.Errorf("root %q became %q", v, c.Root)
		}
	}
	if c = run("root: ../../data/r1\n", "--root=mine"); c.Root != "mine" {
		t.Errorf("--root=mine gave %q, want the flag as typed", c.Root)
	}
	if got := FromConfig("a/b.yaml", ""); got != "" {
		t.Errorf("FromConfig of an empty path: %q", got)
	}
}
