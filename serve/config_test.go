package serve

import (
	"testing"
	"time"
)

// TestConfigValidate pins the message for every field serve-env refuses.
func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		want string // the whole message; "" for valid
	}{
		{"default", func(*Config) {}, ""},
		{"every interface", func(c *Config) { c.Addr = ":8080" }, ""},
		{"data", func(c *Config) { c.Data = "" }, `data "": must name the data root (a folder or gs://bucket/prefix)`},
		{"no addr", func(c *Config) { c.Addr = "" }, `addr "": want host:port, e.g. 127.0.0.1:8080 (:8080 listens on every interface)`},
		{"no port", func(c *Config) { c.Addr = "localhost" }, `addr "localhost": want host:port, e.g. 127.0.0.1:8080 (:8080 listens on every interface)`},
		{"concurrency", func(c *Config) { c.Concurrency = -1 }, "concurrency -1: must not be negative (0: one per core)"},
		{"queue", func(c *Config) { c.Queue = -1 }, "queue -1: must not be negative"},
		{"request_timeout", func(c *Config) { c.RequestTimeout = 0 }, "request_timeout 0s: must be positive"},
		{"max_body_bytes", func(c *Config) { c.MaxBodyBytes = 0 }, "max_body_bytes 0: must be positive"},
		{"shutdown_timeout", func(c *Config) { c.ShutdownTimeout = -time.Second }, "shutdown_timeout -1s: must not be negative"},
		{"env.max_steps", func(c *Config) { c.Env.MaxSteps = 0 }, "env.max_steps 0: must be positive"},
	}
	for _, c := range cases {
		cfg := DefaultConfig()
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
