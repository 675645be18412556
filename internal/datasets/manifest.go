// Package datasets stores versioned, immutable datasets in a [store.Store].
//
// A dataset version is a folder <name>/v<N>/ of Parquet part files and a
// _MANIFEST.json written last; a folder without a manifest is incomplete
// and invisible to readers, and a committed version is never modified.
//
// Where to start:
//   - Writing: [Begin] claims (or, after a crash, resumes) a version for a
//     run key; [WritePart] / [NewPartWriter] add atomic part files, and
//     [Pending.HasPart] lets a resumed run skip finished ones and
//     [ReadPart] / [ReadPending] read back what it wrote;
//     [Pending.Commit] checksums the parts and writes the manifest with a
//     [Producer] (use [NewProducer] with the stage's resolved config) and
//     the parent datasets. [FindRun] finds a run that already committed.
//   - Reading: [Resolve] (a URI such as data/steps or gs://b/p/steps/v3) or
//     [ResolveIn] / [Latest] (inside an open store) give a [Manifest];
//     [ReadAll] / [Each] return typed rows (parquet-go), [EachRecord] Arrow
//     record batches (pqarrow) for columnar readers such as the trainer.
//   - Checking: [Verify] re-hashes every file against the manifest.
package datasets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mlerl/mlerl/internal/store"
)

// File names inside a version folder.
const (
	ManifestFile = "_MANIFEST.json"
	PendingFile  = "_PENDING.json"
)

// ErrNoDataset is wrapped when no committed version exists.
var ErrNoDataset = errors.New("no committed dataset")

// Manifest describes one committed dataset version. It is the JSON form
// printed by `mlerl inspect --json`.
type Manifest struct {
	Name          string    `json:"name"`
	Version       int       `json:"version"`
	Schema        string    `json:"schema"`
	SchemaVersion string    `json:"schema_version"`
	Files         []File    `json:"files"`
	Rows          int64     `json:"rows"`
	Bytes         int64     `json:"bytes"`
	CreatedAt     time.Time `json:"created_at"`
	Producer      Producer  `json:"producer"`
	Parents       []Parent  `json:"parents,omitempty"`
	// RunKey is the run key given to [Begin]; [FindRun] finds a version by it.
	RunKey string `json:"run_key,omitempty"`
	// Extra holds stage-specific facts (summaries, split lists).
	Extra map[string]any `json:"extra,omitempty"`
	// URI is where the manifest was read from; not stored.
	URI string `json:"-"`
}

// File is one part file of a version.
type File struct {
	Path   string `json:"path"` // relative to the version folder
	Rows   int64  `json:"rows"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Producer says what wrote a version.
type Producer struct {
	Command     string `json:"command"`
	Config      any    `json:"config,omitempty"`
	GitRevision string `json:"git_revision,omitempty"`
	Host        string `json:"host,omitempty"`
}

// Parent is a dataset version this one was derived from.
type Parent struct {
	URI     string `json:"uri"`
	Name    string `json:"name"`
	Version int    `json:"version"`
}

// Ref returns the Parent describing m.
func (m *Manifest) Ref() Parent {
	return Parent{URI: strings.TrimSuffix(m.URI, "/"+ManifestFile), Name: m.Name, Version: m.Version}
}

// Dir returns the version folder key.
func Dir(name string, version int) string { return fmt.Sprintf("%s/v%d", name, version) }

var versionRe = regexp.MustCompile(`^v([0-9]+)$`)

// Versions lists the version numbers of a dataset folder, committed or not,
// ascending, and which are committed.
func Versions(ctx context.Context, st store.Store, name string) (all []int, committed map[int]bool, err error) {
	objs, err := st.List(ctx, name+"/")
	if err != nil {
		return nil, nil, err
	}
	seen := map[int]bool{}
	committed = map[int]bool{}
	for _, o := range objs {
		parts := strings.Split(strings.TrimPrefix(o.Key, name+"/"), "/")
		if len(parts) < 2 {
			continue
		}
		m := versionRe.FindStringSubmatch(parts[0])
		if m == nil {
			continue
		}
		v, _ := strconv.Atoi(m[1])
		seen[v] = true
		if len(parts) == 2 && parts[1] == ManifestFile {
			committed[v] = true
		}
	}
	for v := range seen {
		all = append(all, v)
	}
	sort.Ints(all)
	return all, committed, nil
}

// ReadManifest reads the manifest of name/v<version>.
func ReadManifest(ctx context.Context, st store.Store, name string, version int) (*Manifest, error) {
	key := Dir(name, version) + "/" + ManifestFile
	b, err := store.ReadAll(ctx, st, key)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("%s has no %s: %w (the version is missing, or incomplete: its writer died or is still running; rerun the stage to resume it, or name a committed version, see `mlerl ls`)", st.URI(Dir(name, version)), ManifestFile, ErrNoDataset)
		}
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: not a readable manifest (%v): %w; restore it from a good copy or delete the version folder and re-run the stage", st.URI(key), err, ErrCorrupt)
	}
	// Compare the last name segment only: a nested dataset ("exports/sft")
	// may be opened from a deeper store root.
	if path.Base(m.Name) != path.Base(name) || m.Version != version {
		return nil, fmt.Errorf("%s: the manifest describes %s v%d, not %s v%d: %w; was the folder copied or renamed?", st.URI(key), m.Name, m.Version, name, version, ErrCorrupt)
	}
	m.URI = st.URI(key)
	return &m, nil
}

// Latest returns the manifest of the newest committed version of name.
// When there is none, the error (wrapping ErrNoDataset) says why: nothing
// is there, the path is a file or a folder that is not a dataset, or its
// versions are uncommitted (pending, or without a manifest).
func Latest(ctx context.Context, st store.Store, name string) (*Manifest, error) {
	all, committed, err := Versions(ctx, st, name)
	if err != nil {
		return nil, err
	}
	for i := len(all) - 1; i >= 0; i-- {
		if committed[all[i]] {
			return ReadManifest(ctx, st, name, all[i])
		}
	}
	uri := st.URI(name)
	if len(all) > 0 {
		inc, err := Uncommitted(ctx, st, name)
		if err != nil {
			return nil, err
		}
		var what []string
		for _, u := range inc {
			if u.Pending {
				what = append(what, fmt.Sprintf("v%d is pending (being written, or its writer died)", u.Version))
			} else {
				what = append(what, fmt.Sprintf("v%d has neither %s nor %s (its manifest was lost?)", u.Version, ManifestFile, PendingFile))
			}
		}
		return nil, fmt.Errorf("%s: %w: %s; rerun the stage that writes %q with the same config to resume or repair it", uri, ErrNoDataset, strings.Join(what, ", "), name)
	}
	if _, err := st.Stat(ctx, name); err == nil {
		return nil, fmt.Errorf("%s is a file, not a dataset (a folder of v<N> version folders): %w", uri, ErrNoDataset)
	}
	if objs, err := st.List(ctx, name+"/"); err == nil && len(objs) > 0 {
		return nil, fmt.Errorf("%s is not a dataset: %w: it holds no v<N> version folders (`mlerl ls <data root>` lists the datasets)", uri, ErrNoDataset)
	}
	return nil, fmt.Errorf("%s: %w: nothing is there (run the stage that writes %q first, or see `mlerl ls <data root>`)", uri, ErrNoDataset, name)
}

// Incomplete is an uncommitted version folder of a dataset.
type Incomplete struct {
	Version int
	// Pending is true when the folder has its writer's _PENDING.json (a
	// run that is writing it, or died: a rerun with the same run key
	// resumes it); false when it has neither that nor a manifest (a
	// committed version whose manifest was deleted, or stray files).
	Pending bool
}

// Uncommitted lists the version folders of name that have files but no
// manifest, oldest first.
func Uncommitted(ctx context.Context, st store.Store, name string) ([]Incomplete, error) {
	all, committed, err := Versions(ctx, st, name)
	if err != nil {
		return nil, err
	}
	var out []Incomplete
	for _, v := range all {
		if committed[v] {
			continue
		}
		pending, err := store.Exists(ctx, st, Dir(name, v)+"/"+PendingFile)
		if err != nil {
			return nil, err
		}
		out = append(out, Incomplete{Version: v, Pending: pending})
	}
	return out, nil
}

// FindRun returns the committed version of name written with runKey (the
// newest, if several), or nil when there is none. A scheduled stage calls
// it before [Begin] to skip work that an earlier run already committed.
func FindRun(ctx context.Context, st store.Store, name, runKey string) (*Manifest, error) {
	all, committed, err := Versions(ctx, st, name)
	if err != nil {
		return nil, err
	}
	for i := len(all) - 1; i >= 0; i-- {
		if !committed[all[i]] {
			continue
		}
		m, err := ReadManifest(ctx, st, name, all[i])
		if err != nil {
			return nil, err
		}
		if m.RunKey == runKey {
			return m, nil
		}
	}
	return nil, nil
}

// List returns the manifests of every committed version under the store
// root, by dataset name then version. It walks folders one level at a time
// (a delimiter listing on GCS), so the blob store and other folders whose
// names start with "_" or "." cost nothing; dataset names may be nested
// ("exports/sft") up to four levels deep.
func List(ctx context.Context, st store.Store) ([]*Manifest, error) {
	var out []*Manifest
	var walk func(prefix string, depth int) error
	walk = func(prefix string, depth int) error {
		dirs, err := store.Dirs(ctx, st, prefix)
		if err != nil {
			return err
		}
		for _, d := range dirs {
			if strings.HasPrefix(d, "_") || strings.HasPrefix(d, ".") {
				continue
			}
			if m := versionRe.FindStringSubmatch(d); m != nil && prefix != "" {
				v, _ := strconv.Atoi(m[1])
				man, err := ReadManifest(ctx, st, strings.TrimSuffix(prefix, "/"), v)
				if errors.Is(err, ErrNoDataset) {
					continue // incomplete: invisible
				}
				if err != nil {
					return err
				}
				out = append(out, man)
				continue
			}
			if depth < 4 {
				if err := walk(prefix+d+"/", depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk("", 0); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Version < out[j].Version
	})
	return out, nil
}

// SplitURI splits a dataset URI into its store root, dataset name and
// version (0 for "latest"): "data/steps/v3" -> ("data", "steps", 3);
// "gs://b/p/steps" -> ("gs://b/p", "steps", 0).
func SplitURI(uri string) (root, name string, version int, err error) {
	u := strings.TrimSuffix(uri, "/")
	i := strings.LastIndex(u, "/")
	if i < 0 {
		return ".", u, 0, nil
	}
	last := u[i+1:]
	if m := versionRe.FindStringSubmatch(last); m != nil {
		version, _ = strconv.Atoi(m[1])
		u = u[:i]
		i = strings.LastIndex(u, "/")
		if i < 0 {
			return ".", u, version, nil
		}
		last = u[i+1:]
	}
	root = u[:i]
	if root == "" || strings.HasSuffix(root, ":/") {
		return "", "", 0, fmt.Errorf("dataset URI %q: want <root>/<name>[/v<N>]", uri)
	}
	return root, last, version, nil
}

// Resolve opens the store of a dataset URI and reads the manifest it names
// (the latest committed version when the URI has no /v<N>).
func Resolve(ctx context.Context, uri string) (store.Store, *Manifest, error) {
	root, name, version, err := SplitURI(uri)
	if err != nil {
		return nil, nil, err
	}
	st, err := store.Open(ctx, root)
	if err != nil {
		return nil, nil, err
	}
	var m *Manifest
	if version == 0 {
		m, err = Latest(ctx, st, name)
	} else {
		m, err = ReadManifest(ctx, st, name, version)
	}
	if err != nil {
		return nil, nil, err
	}
	return st, m, nil
}

// ResolveIn is Resolve for a name (or name/v<N>) inside an open store.
func ResolveIn(ctx context.Context, st store.Store, ref string) (*Manifest, error) {
	name, ver := ref, 0
	if i := strings.LastIndex(ref, "/"); i >= 0 {
		if m := versionRe.FindStringSubmatch(ref[i+1:]); m != nil {
			name = ref[:i]
			ver, _ = strconv.Atoi(m[1])
		}
	}
	if ver == 0 {
		return Latest(ctx, st, name)
	}
	return ReadManifest(ctx, st, name, ver)
}
