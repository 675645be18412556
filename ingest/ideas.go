package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"

	"golang.org/x/sync/errgroup"

	"github.com/mlerl/mlerl/internal/config"
	"github.com/mlerl/mlerl/internal/datasets"
	"github.com/mlerl/mlerl/internal/diversity"
	"github.com/mlerl/mlerl/internal/embed"
	"github.com/mlerl/mlerl/internal/ideagen"
	"github.com/mlerl/mlerl/internal/llm"
	"github.com/mlerl/mlerl/internal/progress"
	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// Idea sources (IdeasConfig.Source).
const (
	IdeasFromCatalog = "catalog"
	IdeasFromLLM     = "llm"
	IdeasFromBoth    = "both"
)

// IdeasConfig configures `mlerl ingest ideas`.
type IdeasConfig struct {
	// Data is the data root the ideas dataset goes to (and the tasks
	// dataset comes from, unless Tasks is a full URI).
	Data string `yaml:"data" help:"data root: a local folder or gs://bucket/prefix"`
	// Tasks names the tasks dataset version to read.
	Tasks string `yaml:"tasks" help:"tasks dataset: tasks or tasks/v<N> inside the data root, or a full URI such as gs://b/p/tasks/v3 (a name alone: its latest version)"`
	// Source is where candidate ideas come from.
	Source string `yaml:"source" help:"candidates: catalog (built in, offline), llm (the chat endpoint in llm.*) or both"`
	// Only restricts the run to some task ids.
	Only []string `yaml:"only" help:"only these task ids (empty: all tasks of the dataset)"`
	// K and Threshold drive the diversity filter (per task and category).
	K         int     `yaml:"k" help:"ideas kept per task and category"`
	Threshold float64 `yaml:"threshold" help:"cosine similarity above which a candidate is a near-duplicate of a kept idea and is dropped (1 disables the check)"`
	// Seed picks the filter's first idea (0: the most typical one).
	Seed int64 `yaml:"seed" help:"diversity filter start: 0 starts from the idea closest to the pool's mean, any other value from an idea drawn with this seed"`
	// Workers bounds the pools generated and filtered at once.
	Workers int `yaml:"workers" help:"pools (task x category) generated and filtered at once (0: one per CPU core)"`
	// Gen drives LLM generation.
	Gen IdeaGenConfig `yaml:"gen"`
	// LLM is the chat endpoint for source llm or both.
	LLM llm.Config `yaml:"llm"`
	// Embed selects the embedder.
	Embed embed.Config `yaml:"embed"`
}

// IdeaGenConfig drives LLM idea generation.
type IdeaGenConfig struct {
	N                   int     `yaml:"n" help:"candidate ideas asked of the LLM per task and category"`
	MinIdeas            int     `yaml:"min_ideas" help:"fewest usable LLM ideas accepted per task and category; fewer is an error"`
	MaxRounds           int     `yaml:"max_rounds" help:"requests per task and category: the first plus re-asks for a shortfall"`
	MaxIdeaChars        int     `yaml:"max_idea_chars" help:"longer ideas are rejected"`
	MaxDescriptionChars int     `yaml:"max_description_chars" help:"task description cut to this many characters in the prompt"`
	Temperature         float64 `yaml:"temperature" help:"sampling temperature"`
	MaxTokens           int     `yaml:"max_tokens" help:"completion token limit per request"`
}

// DefaultIdeasConfig returns the defaults: catalog ideas for every task
// of the latest tasks dataset in ./data, the built-in hashed embedder,
// 10 kept per task and category with a 0.9 near-duplicate threshold.
func DefaultIdeasConfig() IdeasConfig {
	g := ideagen.DefaultOptions()
	return IdeasConfig{
		Data: "./data", Tasks: schemas.Tasks.Name, Source: IdeasFromCatalog, K: 10, Threshold: 0.9,
		Gen: IdeaGenConfig{N: g.N, MinIdeas: g.MinIdeas, MaxRounds: g.MaxRounds, MaxIdeaChars: g.MaxIdeaChars,
			MaxDescriptionChars: g.MaxDescriptionChars, Temperature: g.Temperature, MaxTokens: g.MaxTokens},
		LLM:   llm.DefaultConfig(),
		Embed: embed.DefaultConfig(),
	}
}

// Validate checks every field, before anything is read or written.
func (c *IdeasConfig) Validate() error {
	switch c.Source {
	case IdeasFromCatalog:
	case IdeasFromLLM, IdeasFromBoth:
		if !c.LLM.Enabled() {
			return config.Errorf("source", c.Source, "needs llm.base_url (an OpenAI-compatible endpoint); use source %s to work offline", IdeasFromCatalog)
		}
	default:
		return config.Errorf("source", c.Source, "want %s, %s or %s", IdeasFromCatalog, IdeasFromLLM, IdeasFromBoth)
	}
	if i := slices.Index(c.Only, ""); i >= 0 {
		return config.Errorf("only", c.Only, "item %d is empty: want task ids", i+1)
	}
	g := c.Gen
	switch {
	case c.Data == "":
		return config.Errorf("data", c.Data, "must name the data root (a folder or gs://bucket/prefix)")
	case c.Tasks == "":
		return config.Errorf("tasks", c.Tasks, "must name the tasks dataset (name, name/vN or a URI)")
	case c.K < 1:
		return config.Errorf("k", c.K, "must be at least 1")
	case !(c.Threshold > -1 && c.Threshold <= 1):
		return config.Errorf("threshold", c.Threshold, "must be in (-1, 1] (a cosine similarity; 1 disables the near-duplicate check)")
	case c.Workers < 0:
		return config.Errorf("workers", c.Workers, "must not be negative (0: one per CPU core)")
	case g.N < 1:
		return config.Errorf("gen.n", g.N, "must be at least 1")
	case g.MinIdeas < 0 || g.MinIdeas > g.N:
		return config.Errorf("gen.min_ideas", g.MinIdeas, "must be in [0, gen.n] (gen.n is %d)", g.N)
	case g.MaxRounds < 1:
		return config.Errorf("gen.max_rounds", g.MaxRounds, "must be at least 1")
	case g.MaxIdeaChars < 1:
		return config.Errorf("gen.max_idea_chars", g.MaxIdeaChars, "must be at least 1")
	case g.MaxDescriptionChars < 1:
		return config.Errorf("gen.max_description_chars", g.MaxDescriptionChars, "must be at least 1")
	case !(g.Temperature >= 0) || math.IsInf(g.Temperature, 0):
		return config.Errorf("gen.temperature", g.Temperature, "must be a number >= 0")
	case g.MaxTokens < 1:
		return config.Errorf("gen.max_tokens", g.MaxTokens, "must be at least 1")
	}
	if err := config.Nest("llm", c.LLM.Validate()); err != nil {
		return err
	}
	return config.Nest("embed", c.Embed.Validate())
}

// ideaPool is the candidates of one task and category, and what became of them.
type ideaPool struct {
	task     schemas.Task
	category string
	ideas    []ideagen.Idea
	report   ideagen.Report
	vecs     diversity.Matrix
	result   diversity.Result
}

// RunIdeas builds the ideas dataset: for every task of the tasks dataset
// and every category it gathers candidate ideas (catalog, LLM or both),
// embeds each pool, keeps up to K diverse ideas per pool with the
// farthest-point filter, and commits all candidates with their verdicts as
// a new version whose manifest names the tasks version as its parent. Any
// error (an endpoint that keeps failing, too few usable LLM ideas, an
// embedder fault) stops the run before anything is committed.
func RunIdeas(ctx context.Context, cfg IdeasConfig) error {
	return runIdeas(ctx, cfg, os.Stdout, os.Stderr)
}

// runIdeas writes its summary table to out and progress and logs to log.
func runIdeas(ctx context.Context, cfg IdeasConfig, out, log io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("ingest ideas: %w", err)
	}
	st, err := store.Open(ctx, cfg.Data)
	if err != nil {
		return err
	}
	taskRows, tasksManifest, err := readIdeaTasks(ctx, st, cfg)
	if err != nil {
		return err
	}
	workers := cfg.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	// The embedder first: a missing model or runtime fails before any
	// LLM tokens are spent.
	emb, err := embed.New(cfg.Embed)
	if err != nil {
		return fmt.Errorf("ingest ideas: %w", err)
	}
	defer embed.Close(emb)

	// 1. Candidates per task and category.
	var gen *ideagen.Generator
	if cfg.Source != IdeasFromCatalog {
		client, err := llm.New(cfg.LLM)
		if err != nil {
			return err
		}
		gen = ideagen.New(client, ideagen.Options{N: cfg.Gen.N, MinIdeas: cfg.Gen.MinIdeas, MaxRounds: cfg.Gen.MaxRounds,
			MaxIdeaChars: cfg.Gen.MaxIdeaChars, MaxDescriptionChars: cfg.Gen.MaxDescriptionChars,
			Temperature: cfg.Gen.Temperature, MaxTokens: cfg.Gen.MaxTokens})
	}
	var pools []*ideaPool
	for _, t := range taskRows {
		for _, cat := range schemas.Categories {
			pools = append(pools, &ideaPool{task: t, category: cat})
		}
	}
	bar := ideasBar(log, "ingest ideas: generate", len(pools))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for _, p := range pools {
		g.Go(func() error {
			catalogIdeas := ideagen.Catalog(p.task, p.category)
			switch cfg.Source {
			case IdeasFromCatalog:
				p.ideas = catalogIdeas
			default:
				generated, rep, err := gen.Generate(gctx, p.task, p.category)
				p.report = rep
				if err != nil {
					return err
				}
				if cfg.Source == IdeasFromBoth {
					generated = ideagen.Merge(catalogIdeas, generated)
				}
				p.ideas = generated
			}
			bar.Add(1, p.task.TaskID+"/"+p.category)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("ingest ideas: generating candidates: %w", err)
	}
	bar.Done()
	total := 0
	for _, p := range pools {
		total += len(p.ideas)
	}
	if total == 0 {
		return fmt.Errorf("ingest ideas: no candidate idea for any of the %d tasks (source %s): the catalog has no idea for their modality and task type; use --source llm or extend internal/catalog", len(taskRows), cfg.Source)
	}

	// 2. Embeddings, one pool per call (the hashed embedder fits its IDF
	// on the pool it filters).
	bar = ideasBar(log, "ingest ideas: embed", total)
	for _, p := range pools {
		if len(p.ideas) == 0 {
			continue
		}
		texts := make([]string, len(p.ideas))
		for i, idea := range p.ideas {
			texts[i] = idea.Text
		}
		vecs, err := emb.Embed(ctx, texts)
		if err != nil {
			return fmt.Errorf("ingest ideas: embedding task %s, category %s with %s: %w", p.task.TaskID, p.category, emb.Name(), err)
		}
		if p.vecs, err = diversity.NewMatrix(vecs); err != nil {
			return fmt.Errorf("ingest ideas: task %s, category %s: %w", p.task.TaskID, p.category, err)
		}
		bar.Add(len(texts), p.task.TaskID+"/"+p.category)
	}
	bar.Done()

	// 3. Diversity filter: k per pool, pools in parallel.
	matrices := make([]diversity.Matrix, len(pools))
	for i, p := range pools {
		matrices[i] = p.vecs
	}
	results, err := diversity.SelectPools(ctx, matrices, diversity.Options{
		K: cfg.K, Threshold: float32(cfg.Threshold), Seed: uint64(cfg.Seed), Workers: workers,
	})
	if err != nil {
		return fmt.Errorf("ingest ideas: diversity filter: %w", err)
	}
	for i, p := range pools {
		p.result = results[i]
	}

	// 4. Rows, then one commit.
	rows, err := ideaRows(pools)
	if err != nil {
		return err
	}
	summary, usage := summarizeIdeas(pools)
	m, err := commitIdeas(ctx, st, cfg, rows, tasksManifest, emb, summary, usage)
	if err != nil {
		return err
	}
	printIdeasSummary(out, summary, usage)
	fmt.Fprintf(log, "ingest ideas: wrote %s (%d ideas, %d kept, embedder %s)\n", strings.TrimSuffix(m.URI, "/"+datasets.ManifestFile), m.Rows, countKept(rows), emb.Name())
	return nil
}

// readIdeaTasks resolves the tasks dataset (a name inside the data root or a
// full URI) and returns its rows, restricted to cfg.Only.
func readIdeaTasks(ctx context.Context, st store.Store, cfg IdeasConfig) ([]schemas.Task, *datasets.Manifest, error) {
	tst, ref := st, cfg.Tasks
	var m *datasets.Manifest
	var err error
	if strings.Contains(ref, "://") || strings.HasPrefix(ref, "/") || strings.HasPrefix(ref, ".") {
		tst, m, err = datasets.Resolve(ctx, ref)
	} else {
		m, err = datasets.ResolveIn(ctx, st, ref)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("ingest ideas: tasks dataset %q: %w (run `mlerl ingest tasks` first)", ref, err)
	}
	rows, err := datasets.ReadAll[schemas.Task](ctx, tst, m, schemas.Tasks)
	if err != nil {
		return nil, nil, fmt.Errorf("ingest ideas: %w", err)
	}
	if len(cfg.Only) > 0 {
		var kept []schemas.Task
		for _, id := range cfg.Only {
			i := slices.IndexFunc(rows, func(t schemas.Task) bool { return t.TaskID == id })
			if i < 0 {
				return nil, nil, fmt.Errorf("ingest ideas: task %q (from only) is not in %s v%d", id, m.Name, m.Version)
			}
			kept = append(kept, rows[i])
		}
		rows = kept
	}
	if len(rows) == 0 {
		return nil, nil, fmt.Errorf("ingest ideas: %s v%d has no tasks", m.Name, m.Version)
	}
	return rows, m, nil
}

// ideaRows turns the pools into dataset rows, in task, category and
// candidate order. Ids are <task>/<catalog id> for catalog ideas and
// <task>/<category>/llm-<sha256 of the text, 12 hex> for LLM ideas.
func ideaRows(pools []*ideaPool) ([]schemas.Idea, error) {
	var rows []schemas.Idea
	ids := map[string]bool{}
	for _, p := range pools {
		for i, idea := range p.ideas {
			id := p.task.TaskID + "/" + idea.ID
			if idea.ID == "" {
				h := sha256.Sum256([]byte(idea.Text))
				id = p.task.TaskID + "/" + p.category + "/llm-" + hex.EncodeToString(h[:6])
			}
			if ids[id] {
				return nil, fmt.Errorf("ingest ideas: idea id %q appears twice (task %s, category %s): catalog ids must be unique", id, p.task.TaskID, p.category)
			}
			ids[id] = true
			rows = append(rows, schemas.Idea{
				IdeaID: id, TaskID: p.task.TaskID, Category: p.category, Text: idea.Text,
				Source: idea.Source, Edit: idea.Edit, Embedding: p.vecs.Row(i),
				Kept: p.result.Kept[i], Rank: p.result.Rank[i], NearestKeptSim: p.result.NearestSim[i],
			})
		}
	}
	return rows, nil
}

// poolSummary is one task and category's line of the summary (and of the
// manifest's Extra["pools"]).
type poolSummary struct {
	Task       string `json:"task"`
	Category   string `json:"category"`
	Candidates int    `json:"candidates"`
	Kept       int    `json:"kept"`
	// MeanDistKept and MeanDistAll are mean pairwise cosine distances of
	// the kept set and of all candidates.
	MeanDistKept float64        `json:"mean_dist_kept"`
	MeanDistAll  float64        `json:"mean_dist_all"`
	Requests     int            `json:"llm_requests,omitempty"`
	Rejected     map[string]int `json:"llm_rejected,omitempty"`
	Malformed    int            `json:"llm_malformed,omitempty"`
}

func summarizeIdeas(pools []*ideaPool) ([]poolSummary, ideagen.Report) {
	var out []poolSummary
	var total ideagen.Report
	for _, p := range pools {
		all := make([]int, p.vecs.Rows)
		for i := range all {
			all[i] = i
		}
		out = append(out, poolSummary{
			Task: p.task.TaskID, Category: p.category, Candidates: len(p.ideas), Kept: len(p.result.Order),
			MeanDistKept: diversity.MeanPairwiseDistance(p.vecs, p.result.Order),
			MeanDistAll:  diversity.MeanPairwiseDistance(p.vecs, all),
			Requests:     p.report.Requests, Rejected: p.report.Rejected, Malformed: p.report.Malformed,
		})
		total.Add(p.report)
	}
	return out, total
}

func commitIdeas(ctx context.Context, st store.Store, cfg IdeasConfig, rows []schemas.Idea, tasks *datasets.Manifest, emb embed.Embedder, summary []poolSummary, usage ideagen.Report) (*datasets.Manifest, error) {
	key := sha256.Sum256([]byte(config.Canonical(cfg) + fmt.Sprintf("%s/v%d", tasks.Name, tasks.Version)))
	p, err := datasets.Begin(ctx, st, schemas.Ideas.Name, schemas.Ideas, "ingest-ideas-"+hex.EncodeToString(key[:8]))
	if err != nil {
		return nil, err
	}
	if err := datasets.WritePart(ctx, p, "part-00000.parquet", rows); err != nil {
		return nil, err
	}
	var sources []string
	for _, r := range rows {
		if !slices.Contains(sources, r.Source) {
			sources = append(sources, r.Source)
		}
	}
	return p.Commit(ctx, datasets.CommitOptions{
		Producer: datasets.Producer{Command: "mlerl ingest ideas", Config: cfg},
		Parents:  []datasets.Parent{tasks.Ref()},
		Extra: map[string]any{
			"sources":   sources,
			"embedder":  emb.Name(),
			"dim":       emb.Dim(),
			"k":         cfg.K,
			"threshold": cfg.Threshold,
			"seed":      cfg.Seed,
			"kept":      countKept(rows),
			"pools":     summary,
			// The hashed embedder's IDF is fitted per pool: compare
			// embeddings within a task and category only.
			"embedding_scope": "pool",
			"embed_usage":     embedUsage(emb),
			"llm": map[string]any{
				"requests": usage.Requests, "prompt_tokens": usage.Usage.PromptTokens,
				"completion_tokens": usage.Usage.CompletionTokens, "cost_usd": usage.Usage.CostUSD,
				"returned": usage.Returned, "usable": usage.Usable, "rejected": usage.Rejected, "malformed": usage.Malformed,
			},
		},
	})
}

// ideasBar draws a bar on a terminal stderr and logs lines elsewhere.
func ideasBar(log io.Writer, label string, total int) *progress.Bar {
	if log == os.Stderr {
		return progress.New(label, total)
	}
	return progress.NewTo(log, false, label, total)
}

// embedUsage is the token accounting of an embedder that calls an
// endpoint; nil for local ones.
func embedUsage(e embed.Embedder) any {
	if u, ok := e.(interface{ Usage() llm.Usage }); ok {
		return u.Usage()
	}
	return nil
}

func countKept(rows []schemas.Idea) int {
	n := 0
	for _, r := range rows {
		if r.Kept {
			n++
		}
	}
	return n
}

// printIdeasSummary writes one line per task and category, then the LLM
// usage when there was any.
func printIdeasSummary(w io.Writer, summary []poolSummary, usage ideagen.Report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tCATEGORY\tCANDIDATES\tKEPT\tMEAN_DIST_KEPT\tMEAN_DIST_ALL")
	for _, s := range summary {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.3f\t%.3f\n", s.Task, s.Category, s.Candidates, s.Kept, s.MeanDistKept, s.MeanDistAll)
	}
	tw.Flush()
	if usage.Requests > 0 {
		fmt.Fprintf(w, "llm: %d requests, %d prompt + %d completion tokens, $%.4f; %d ideas returned, %d usable, rejected %v, %d malformed answers\n",
			usage.Requests, usage.Usage.PromptTokens, usage.Usage.CompletionTokens, usage.Usage.CostUSD,
			usage.Returned, usage.Usable, usage.Rejected, usage.Malformed)
	}
}
