package llm

import (
	"math"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		want string // "" for valid
	}{
		{"default", func(*Config) {}, ""},
		{"endpoint", func(c *Config) { c.BaseURL = "https://api.example.com/v1" }, ""},
		{"no scheme", func(c *Config) { c.BaseURL = "localhost:8000/v1" }, `base_url "localhost:8000/v1": want an http:// or https:// URL such as http://localhost:8000/v1 (empty: offline)`},
		{"no host", func(c *Config) { c.BaseURL = "http:///v1" }, `base_url "http:///v1": want an http:// or https:// URL such as http://localhost:8000/v1 (empty: offline)`},
		{"key in api_key_env", func(c *Config) { c.APIKeyEnv = "OPENAI_API_KEY=sk-1" }, `api_key_env "OPENAI_API_KEY=sk-1": want the name of an environment variable, not the key itself`},
		{"negative timeout", func(c *Config) { c.Timeout = -time.Second }, "timeout -1s: must not be negative (0: 2m0s)"},
		{"negative retries", func(c *Config) { c.MaxRetries = -1 }, "max_retries -1: must not be negative"},
		{"negative rate", func(c *Config) { c.RequestsPerSec = -2 }, "requests_per_sec -2: must be a number >= 0 (0: no limit)"},
		{"NaN rate", func(c *Config) { c.RequestsPerSec = math.NaN() }, "requests_per_sec NaN: must be a number >= 0 (0: no limit)"},
		{"negative prompt price", func(c *Config) { c.PromptPrice = -0.5 }, "prompt_price -0.5: must be a number >= 0 (USD per million tokens)"},
		{"infinite completion price", func(c *Config) { c.CompletionPrice = math.Inf(1) }, "completion_price +Inf: must be a number >= 0 (USD per million tokens)"},
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		c.edit(&cfg)
		err := cfg.Validate()
		if got := errString(err); got != c.want {
			t.Errorf("%s: got %q want %q", c.name, got, c.want)
		}
	}
	if _, err := New(Config{BaseURL: "http://x", MaxRetries: -3}); errString(err) != "llm.max_retries -3: must not be negative" {
		t.Errorf("New: got %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
