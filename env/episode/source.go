package episode

import "github.com/mlerl/mlerl/internal/config"

// Source is the part of a stage's configuration that says where its
// episodes' tasks come from: the data root and the tasks and ideas
// datasets in it (see [Load]). A stage embeds it inline, first, so that
// its keys stay data, tasks and ideas.
type Source struct {
	Data  string `yaml:"data" help:"data root (local path or gs://bucket/prefix)"`
	Tasks string `yaml:"tasks" help:"tasks dataset in the data root (name, or name/vN)"`
	Ideas string `yaml:"ideas" help:"ideas dataset (the plans' kept ideas) in the data root (name, or name/vN)"`
}

// DefaultSource is the data root ./data with its tasks and ideas datasets.
func DefaultSource() Source {
	return Source{Data: "./data", Tasks: "tasks", Ideas: "ideas"}
}

// Validate checks that every field names something.
func (s *Source) Validate() error {
	switch {
	case s.Data == "":
		return config.Errorf("data", s.Data, "must name the data root (a folder or gs://bucket/prefix)")
	case s.Tasks == "":
		return config.Errorf("tasks", s.Tasks, "must name the tasks dataset (name or name/vN)")
	case s.Ideas == "":
		return config.Errorf("ideas", s.Ideas, "must name the ideas dataset (name or name/vN)")
	}
	return nil
}
