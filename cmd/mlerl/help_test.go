package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// eachCommand visits every command of the tree.
func eachCommand(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, s := range c.Commands() {
		eachCommand(s, fn)
	}
}

// TestFlagHelp checks what --help shows: a help text never states its own
// default (pflag appends "(default ...)" already, so it showed twice), and
// every snake_case flag takes its kebab-case spelling, hidden from the list.
func TestFlagHelp(t *testing.T) {
	eachCommand(newRootCommand(), func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "(default") {
				t.Errorf("%s --%s: help %q states its default; pflag adds (default %s)", c.CommandPath(), f.Name, f.Usage, f.DefValue)
			}
			if k := strings.ReplaceAll(f.Name, "_", "-"); k != f.Name {
				if a := c.Flags().Lookup(k); a == nil || !a.Hidden {
					t.Errorf("%s --%s: no hidden alias --%s", c.CommandPath(), f.Name, k)
				}
			}
		})
	})
	out, err := run(t, "ingest", "tasks", "--help")
	if err != nil {
		t.Fatal(err)
	}
	// The default shows once (the column width depends on the longest flag).
	if !regexp.MustCompile(`--data string +data root: a local folder or gs://bucket/prefix \(default "./data"\)\n`).MatchString(out) {
		t.Errorf("ingest tasks --help: --data's line does not show its default once:\n%s", out)
	}
	if strings.Contains(out, "--import-to") {
		t.Errorf("ingest tasks --help lists the hidden alias --import-to:\n%s", out)
	}
}

// TestPrintConfigRoundTrips prints every stage's config, loads it back
// and prints it again: the same text, with each list's comment on the
// list's own line.
func TestPrintConfigRoundTrips(t *testing.T) {
	for _, stage := range [][]string{{"ingest", "tasks"}, {"ingest", "ideas"}, {"rollout"}, {"rollout", "commit"}, {"dataset"}, {"train", "sft"}, {"train", "ppo"}, {"evaluate"}, {"serve-env"}} {
		name := strings.Join(stage, " ")
		first, err := run(t, append(stage, "--print-config")...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, []byte(first), 0o644); err != nil {
			t.Fatal(err)
		}
		again, err := run(t, append(stage, "--config", path, "--print-config")...)
		if err != nil {
			t.Fatalf("%s: loading its own --print-config: %v", name, err)
		}
		if again != first {
			t.Errorf("%s: --print-config does not round-trip:\n%s\n---\n%s", name, first, again)
		}
	}
	out, _ := run(t, "rollout", "--print-config")
	for _, w := range []string{"only: [] # task ids to roll out (empty: all of the split)\n", "\nenv:\n  max_steps: 15"} {
		if !strings.Contains(out, w) {
			t.Errorf("rollout --print-config lacks %q:\n%s", w, out)
		}
	}
}
