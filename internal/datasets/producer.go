package datasets

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"
)

// GitRevision is the git commit the binary was built from. `make build`
// sets it with
//
//	-ldflags "-X github.com/mlerl/mlerl/internal/datasets.GitRevision=<rev>"
//
// When it is empty, [Revision] falls back to the VCS stamp Go embeds in
// binaries built inside a checkout, then to `git rev-parse HEAD`.
var GitRevision string

var revisionOnce = sync.OnceValue(func() string {
	if GitRevision != "" {
		return GitRevision
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev string
		var dirty bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if dirty {
				rev += "-dirty"
			}
			return rev
		}
	}
	// go run and go test binaries carry no VCS stamp: ask git, briefly.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// Only inside an mlerl checkout: elsewhere git would name another repository.
	top, err := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return ""
	}
	dir := strings.TrimSpace(string(top))
	if mod, err := os.ReadFile(filepath.Join(dir, "go.mod")); err != nil || !strings.Contains(string(mod), "module github.com/mlerl/mlerl\n") {
		return ""
	}
	out, err := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if exec.CommandContext(ctx, "git", "-C", dir, "diff", "--quiet", "HEAD").Run() != nil {
		rev += "-dirty"
	}
	return rev
})

// Revision returns the git revision of the running code ("<sha>" or
// "<sha>-dirty"), or "" when it cannot be known (a binary built outside a
// checkout without -ldflags).
func Revision() string { return revisionOnce() }

// NewProducer describes the running command for a manifest: its command
// line, the resolved stage config (as the YAML keys a user would write,
// secrets redacted) and the git revision.
func NewProducer(cfg any) Producer {
	p := Producer{Command: commandLine(os.Args), GitRevision: Revision()}
	p.Host, _ = os.Hostname()
	if cfg != nil {
		p.Config = configValue(cfg)
	}
	return p
}

// commandLine joins args, quoting those a shell would split.
func commandLine(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`*?;&|<>()[]{}") {
			a = strconv.Quote(a)
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

// configValue renders cfg through its yaml tags into plain maps, so the
// manifest shows "base_url", not "BaseURL".
func configValue(cfg any) any {
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return map[string]any{"error": "cannot render config: " + err.Error()}
	}
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return map[string]any{"error": "cannot render config: " + err.Error()}
	}
	return redact(v)
}

// redact blanks values of keys that look like secrets.
func redact(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			lk := strings.ToLower(k)
			if s, ok := x.(string); ok && s != "" && (lk == "api_key" || strings.HasSuffix(lk, "password") || strings.HasSuffix(lk, "secret")) {
				v[k] = "<redacted>"
				continue
			}
			v[k] = redact(x)
		}
	case []any:
		for i := range v {
			v[i] = redact(v[i])
		}
	}
	return v
}
