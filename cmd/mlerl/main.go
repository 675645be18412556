// Command mlerl runs the stages of the mlerl pipeline and inspects the
// datasets they write. Each stage is one subcommand (ingest, rollout,
// dataset, train, evaluate); ls, inspect, head and verify read datasets;
// generate prints one answer of a model to one prompt (generate.go).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/progress"
	"github.com/mlerl/mlerl/policy/native"
)

// commands holds the constructors of the subcommands; each file of this
// package adds its own in an init function.
var commands []func() *cobra.Command

// exitError carries a specific exit status (e.g. 1 when some tasks failed
// but the rest were written).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// newRootCommand assembles the binary's command tree.
func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "mlerl",
		Short:         "Train machine-learning-engineering agents with reinforcement learning",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRun: func(cmd *cobra.Command, _ []string) {
			if runsThePolicy(cmd) {
				setGCPercent()
				if note := native.SlowBuild(); note != "" {
					fmt.Fprintln(cmd.ErrOrStderr(), note)
				}
			}
		},
	}
	for _, c := range commands {
		root.AddCommand(c())
	}
	return root
}

// runsThePolicy: the commands that train or run the policy, whose log
// names a binary built without its vector kernels.
func runsThePolicy(cmd *cobra.Command) bool {
	for c := cmd; c != nil; c = c.Parent() {
		switch c.Name() {
		case "train", "evaluate", "experiment", "generate", "gpu-check":
			return true
		}
	}
	return false
}

func main() {
	os.Exit(mainStatus())
}

// mainStatus runs the command line and returns the exit status (deferred
// work, the CPU profile's end included, runs before main exits).
func mainStatus() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	endProfile, err := startCPUProfile(os.Getenv(CPUProfileEnv))
	if err != nil {
		fmt.Fprintf(os.Stderr, "mlerl: %v\n", err)
		return 2
	}
	defer endProfile()
	endMem, err := startMemProfile(os.Getenv(MemProfileEnv))
	if err != nil {
		fmt.Fprintf(os.Stderr, "mlerl: %v\n", err)
		return 2
	}
	defer endMem()
	if cmd, err := newRootCommand().ExecuteContextC(ctx); err != nil {
		fmt.Fprintln(os.Stderr, errorLine(ctx, cmd, err))
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return 1
	}
	return 0
}

// CPUProfileEnv names a file that receives the whole command's CPU
// profile (go tool pprof reads it): where a stage's time goes, for any
// stage, without a flag of its own.
const CPUProfileEnv = "MLERL_CPUPROFILE"

// startCPUProfile starts a CPU profile into path (nothing when path is
// empty) and returns the function that ends it.
func startCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := createProfile(CPUProfileEnv, path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: starting the CPU profile into %s: %w", CPUProfileEnv, path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "mlerl: %s: writing %s: %v\n", CPUProfileEnv, path, err)
		}
	}, nil
}

// createProfile creates the file the variable env names, or says which
// variable named a path that cannot be created.
func createProfile(env, path string) (*os.File, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (unset it, or name a writable file)", env, err)
	}
	return f, nil
}

// errorLine is the one line a failed command leaves on stderr. A stage
// stopped by a signal says so and what a rerun does, in its own words
// when it reports how far it got (progress.InterruptedError).
func errorLine(ctx context.Context, cmd *cobra.Command, err error) string {
	switch {
	case ctx.Err() == nil || !errors.Is(err, context.Canceled):
		return fmt.Sprintf("mlerl: %v", err)
	case progress.IsInterrupted(err):
		return err.Error()
	case cmd == nil:
		return fmt.Sprintf("mlerl: interrupted (%v)", err)
	case strings.Contains(err.Error(), "rerun"): // the stage says what a rerun does
		return fmt.Sprintf("%s: interrupted: %v", cmd.CommandPath(), err)
	default:
		return fmt.Sprintf("%s: interrupted (%v); rerun the same command to finish: a stage resumes its pending version, and committed versions are never rewritten", cmd.CommandPath(), err)
	}
}

// stageCommand builds a subcommand whose flags are the fields of a stage's
// Config T. --config loads a YAML file (flags override it), --print-config
// prints the resolved config and exits; otherwise the resolved config is
// printed to stderr and run is called with it. A stage stores the same
// config in its manifests with datasets.NewProducer(cfg).
func stageCommand[T any](use, short string, defaults func() T, run func(ctx context.Context, cfg T) error) *cobra.Command {
	var (
		path  string
		print bool
		bound = defaults()
	)
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `.

Every flag is a config key (nested keys join with a dot: --llm.base_url)
and takes the kebab-case spelling too (--llm.base-url). Order: defaults,
then the --config YAML file, then flags. The config is checked before
anything is read or written; --print-config prints it, resolved.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Resolve(cmd.Flags(), path, defaults)
			if err != nil {
				// "rollout: --slip_rate 1.5: must be in [0, 1]"
				return fmt.Errorf("%s: %w", strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" "), err)
			}
			if print {
				fmt.Fprint(cmd.OutOrStdout(), config.YAML(cfg))
				return nil
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "# %s: resolved config\n%s", cmd.CommandPath(), indent(config.YAML(cfg)))
			return run(cmd.Context(), cfg)
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "YAML config file (flags override its values)")
	cmd.Flags().BoolVar(&print, "print-config", false, "print the resolved config as YAML and exit")
	config.Bind(cmd.Flags(), &bound)
	return cmd
}

func indent(s string) string {
	return "#   " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n#   ") + "\n"
}
