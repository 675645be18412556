package env

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlerl/mlerl/internal/safefile"
	"github.com/mlerl/mlerl/internal/sandbox"
)

// ExecCache memoizes script executions by everything a run can read: the
// script's path and source, every file and folder of the workspace (path,
// mode, content), the limits, the interpreter and the instrumenter. A run
// whose inputs match an earlier one is not run again: the earlier run's
// output, outcome and duration are returned and the files it wrote,
// changed or removed in its workspace are replayed into this one, so the
// environment goes on exactly as after a real run (grading reads the
// replayed submission). Step-wise RL samples several actions in one state
// and most of them run the same script on the same files (SCIENCE.md's
// run 13: two thirds of the PPO arm's script time repeated a run of the
// same group); evaluation's trajectories start from the same workspace.
//
// Only runs that end as a success or a script error are kept (both are a
// function of the inputs for a script that does not read the clock or an
// unseeded random source); timeouts, out-of-memory runs, kills and output
// floods depend on the machine's load and always run, except timeouts
// when the cache was made to keep them (Config.ExecCacheTimeouts: a
// policy that runs a timed-out script again unchanged then waits for the
// limit once, on the assumption that the same run would time out again).
// A run that leaves anything but regular files and folders in its
// workspace (a symlink, a FIFO), or more than maxEntryBytes of new files,
// is not kept. A script that draws unseeded random numbers gets one draw
// per distinct workspace.
// Concurrent runs with equal inputs wait for the first (one flight per
// key). Entries are dropped least recently used past the byte budget.
//
// Safe for concurrent use; share one per stage through Config.ExecCache.
type ExecCache struct {
	maxBytes int64
	timeouts bool // keep timed-out runs too (Config.ExecCacheTimeouts)

	mu      sync.Mutex
	bytes   int64
	lru     *list.List // of *execEntry, most recent first
	entries map[string]*list.Element
	flights map[string]*execFlight

	hits, misses, bypassed atomic.Int64
	savedNS                atomic.Int64
}

// ExecCacheStats counts what the cache did.
type ExecCacheStats struct {
	Hits, Misses int64
	// Bypassed counts runs the cache could not key or keep (a symlink in
	// the workspace, an LLM instrumenter, a timeout, a large output file).
	Bypassed int64
	// Saved is the run time the hits did not spend again (the cached runs'
	// durations minus the replays').
	Saved   time.Duration
	Entries int
	Bytes   int64
}

// String says what the cache saved, for a stage's log ("" before any run):
// "312 of 540 script runs replayed (3m12s of script time not spent again)".
func (s ExecCacheStats) String() string {
	n := s.Hits + s.Misses + s.Bypassed
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d script runs replayed from the execution cache (%v of script time not spent again)", s.Hits, n, s.Saved.Round(time.Second))
}

// HitRate is Hits / (Hits + Misses + Bypassed), 0 before any run.
func (s ExecCacheStats) HitRate() float64 {
	n := s.Hits + s.Misses + s.Bypassed
	if n == 0 {
		return 0
	}
	return float64(s.Hits) / float64(n)
}

// Sub returns the counts since an earlier reading (entries and bytes as now).
func (s ExecCacheStats) Sub(before ExecCacheStats) ExecCacheStats {
	s.Hits -= before.Hits
	s.Misses -= before.Misses
	s.Bypassed -= before.Bypassed
	s.Saved -= before.Saved
	return s
}

// DefaultExecCacheBytes is the byte budget stages give their cache.
const DefaultExecCacheBytes = 256 << 20

// maxEntryBytes bounds one entry's output and files: a run that writes
// more is not kept.
const maxEntryBytes = 32 << 20

// NewExecCache returns an empty cache holding at most maxBytes of outputs
// and files (<= 0: DefaultExecCacheBytes).
func NewExecCache(maxBytes int64) *ExecCache {
	if maxBytes <= 0 {
		maxBytes = DefaultExecCacheBytes
	}
	return &ExecCache{maxBytes: maxBytes, lru: list.New(), entries: map[string]*list.Element{}, flights: map[string]*execFlight{}}
}

// NewExecCacheFor returns the cache a stage shares across its episodes
// when cfg.ExecCacheOn is set, else nil (every run runs).
func NewExecCacheFor(cfg Config) *ExecCache {
	if !cfg.ExecCacheOn {
		return nil
	}
	c := NewExecCache(DefaultExecCacheBytes)
	c.timeouts = cfg.ExecCacheTimeouts
	return c
}

// Stats returns the counts so far; safe on a nil cache (all zero).
func (c *ExecCache) Stats() ExecCacheStats {
	if c == nil {
		return ExecCacheStats{}
	}
	c.mu.Lock()
	n, b := len(c.entries), c.bytes
	c.mu.Unlock()
	return ExecCacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Bypassed: c.bypassed.Load(),
		Saved: time.Duration(c.savedNS.Load()), Entries: n, Bytes: b}
}

// execEntry is one kept run: its result (stdout as printed, with the
// markers of its nonce) and what it did to its workspace.
type execEntry struct {
	key     string
	res     sandbox.Result
	nonce   string
	dirs    []wsFile // folders it made (no data), parents first
	files   []wsFile // files it wrote or changed
	removed []string // files and folders it removed, deepest first
	bytes   int64
}

type wsFile struct {
	path string
	mode fs.FileMode
	data []byte
}

type execFlight struct {
	done  chan struct{}
	entry *execEntry // nil: the run was not kept (the waiter runs its own)
}

// execRun is one run the cache stands in front of.
type execRun struct {
	dir    string
	script string // relative path
	source []byte // as the agent wrote it, before instrumentation
	limits sandbox.Limits
	python string
	instr  string // the instrumenter's kind
	nonce  string
}

// run returns the result of r: replayed from the cache, or run by do and
// kept. The returned nonce is the one the stdout's markers carry (the
// original run's on a hit); hit reports a replay.
func (c *ExecCache) run(ctx context.Context, r execRun, do func() (sandbox.Result, error)) (_ sandbox.Result, nonce string, hit bool, _ error) {
	before, key, ok := c.key(r)
	if !ok {
		c.bypassed.Add(1)
		res, err := do()
		return res, r.nonce, false, err
	}
	var f *execFlight
	for f == nil {
		c.mu.Lock()
		if el, hit := c.entries[key]; hit {
			c.lru.MoveToFront(el)
			en := el.Value.(*execEntry)
			c.mu.Unlock()
			return c.replay(r.dir, en)
		}
		other, flying := c.flights[key]
		if !flying {
			f = &execFlight{done: make(chan struct{})}
			c.flights[key] = f
			c.mu.Unlock()
			break
		}
		c.mu.Unlock()
		select {
		case <-other.done:
		case <-ctx.Done():
			return sandbox.Result{}, "", false, ctx.Err()
		}
		if other.entry == nil { // the first run was not kept: run this one
			c.misses.Add(1)
			res, err := do()
			return res, r.nonce, false, err
		}
	}
	var en *execEntry
	defer func() { c.land(key, f, en) }()
	c.misses.Add(1)
	res, err := do()
	if err == nil && (res.Outcome == sandbox.Success || res.Outcome == sandbox.ScriptError || (c.timeouts && res.Outcome == sandbox.Timeout)) {
		if en = diffWorkspace(r.dir, before, res); en != nil {
			en.key, en.nonce = key, r.nonce
		}
	}
	return res, r.nonce, false, err
}

// land ends a flight: en (nil: not kept) enters the cache and the waiters
// are woken.
func (c *ExecCache) land(key string, f *execFlight, en *execEntry) {
	c.mu.Lock()
	delete(c.flights, key)
	if en != nil {
		if old, ok := c.entries[key]; ok { // cannot happen with one flight per key
			c.drop(old)
		}
		c.entries[key] = c.lru.PushFront(en)
		c.bytes += en.bytes
		for c.bytes > c.maxBytes && c.lru.Len() > 1 {
			c.drop(c.lru.Back())
		}
	}
	f.entry = en
	c.mu.Unlock()
	close(f.done)
}

func (c *ExecCache) drop(el *list.Element) {
	en := c.lru.Remove(el).(*execEntry)
	delete(c.entries, en.key)
	c.bytes -= en.bytes
}

// replay applies a kept run's changes to the workspace dir and returns its
// result.
func (c *ExecCache) replay(dir string, en *execEntry) (sandbox.Result, string, bool, error) {
	start := time.Now()
	for _, p := range en.removed {
		if err := os.RemoveAll(filepath.Join(dir, filepath.FromSlash(p))); err != nil {
			return sandbox.Result{}, "", false, fmt.Errorf("env: replaying a cached run: %w", err)
		}
	}
	// Folders are made writable first and given their modes last, so
	// that a read-only folder's files can be written.
	for _, d := range en.dirs {
		if err := os.Mkdir(filepath.Join(dir, filepath.FromSlash(d.path)), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return sandbox.Result{}, "", false, fmt.Errorf("env: replaying a cached run: %w", err)
		}
	}
	for _, f := range en.files {
		abs := filepath.Join(dir, filepath.FromSlash(f.path))
		// A file the run rewrote may be read-only now: write a new one.
		if err := os.Remove(abs); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return sandbox.Result{}, "", false, fmt.Errorf("env: replaying a cached run: %w", err)
		}
		if err := safefile.WriteFile(dir, f.path, f.data, f.mode); err != nil {
			return sandbox.Result{}, "", false, fmt.Errorf("env: replaying a cached run: %w", err)
		}
		if err := os.Chmod(abs, f.mode); err != nil {
			return sandbox.Result{}, "", false, fmt.Errorf("env: replaying a cached run: %w", err)
		}
	}
	for i := len(en.dirs) - 1; i >= 0; i-- {
		d := en.dirs[i]
		if err := os.Chmod(filepath.Join(dir, filepath.FromSlash(d.path)), d.mode); err != nil {
			return sandbox.Result{}, "", false, fmt.Errorf("env: replaying a cached run: %w", err)
		}
	}
	c.hits.Add(1)
	if saved := en.res.Duration - time.Since(start); saved > 0 {
		c.savedNS.Add(int64(saved))
	}
	return en.res, en.nonce, true, nil
}

// wsItem is one workspace entry as the key saw it.
type wsItem struct {
	dir  bool
	mode fs.FileMode
	size int64
	hash [sha256.Size]byte
}

// execCacheVersion changes whenever what a key covers changes.
const execCacheVersion = "mlerl-exec-cache-v1"

// key hashes everything the run can read. ok is false when the workspace
// holds something other than regular files and folders, or something
// unreadable, or the instrumenter's output is not a function of the
// source and nonce.
func (c *ExecCache) key(r execRun) (map[string]wsItem, string, bool) {
	if r.instr == "" {
		return nil, "", false
	}
	items, ok := walkWorkspace(r.dir)
	if !ok {
		return nil, "", false
	}
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field([]byte(execCacheVersion))
	field([]byte(r.script))
	field(r.source)
	field([]byte(r.python))
	field([]byte(r.instr))
	field([]byte(fmt.Sprintf("%+v", r.limits)))
	paths := make([]string, 0, len(items))
	for p := range items {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		it := items[p]
		field([]byte(p))
		field([]byte(fmt.Sprintf("%t %o %d", it.dir, it.mode, it.size)))
		if !it.dir {
			field(it.hash[:])
		}
	}
	return items, hex.EncodeToString(h.Sum(nil)), true
}

// maxWalkEntries bounds the files and folders a keyed workspace may hold:
// a run that leaves more is not kept, a workspace with more is not keyed.
const maxWalkEntries = 10000

// walkWorkspace hashes every file and lists every folder under dir.
func walkWorkspace(dir string) (map[string]wsItem, bool) {
	items := map[string]wsItem{}
	var hasher hash.Hash
	ok := true
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		if len(items) >= maxWalkEntries {
			ok = false
			return filepath.SkipAll
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			items[rel] = wsItem{dir: true, mode: info.Mode().Perm()}
		case d.Type().IsRegular():
			f, err := safefile.Open(dir, rel, safefile.Options{})
			if err != nil {
				return err
			}
			defer f.Close()
			if hasher == nil {
				hasher = sha256.New()
			}
			hasher.Reset()
			n, err := f.WriteTo(hasher)
			if err != nil {
				return err
			}
			it := wsItem{mode: info.Mode().Perm(), size: n}
			copy(it.hash[:], hasher.Sum(nil))
			items[rel] = it
		default:
			ok = false
			return filepath.SkipAll
		}
		return nil
	})
	return items, ok && err == nil
}

// diffWorkspace records what a run did to dir since before: nil when the
// run left something the cache cannot replay, or too much.
func diffWorkspace(dir string, before map[string]wsItem, res sandbox.Result) *execEntry {
	after, ok := walkWorkspace(dir)
	if !ok {
		return nil
	}
	en := &execEntry{res: res, bytes: int64(len(res.Stdout) + len(res.Stderr) + 512)}
	var paths []string
	for p := range after {
		paths = append(paths, p)
	}
	sort.Strings(paths) // parents before children
	for _, p := range paths {
		a := after[p]
		b, existed := before[p]
		switch {
		case existed && a == b:
			continue
		case existed && a.dir != b.dir: // a file became a folder or back
			return nil
		case a.dir && existed: // a folder's mode changed
			return nil
		case a.dir:
			en.dirs = append(en.dirs, wsFile{path: p, mode: a.mode})
		default:
			data, err := safefile.ReadFile(dir, p, safefile.Options{MaxBytes: maxEntryBytes})
			if err != nil || int64(len(data)) != a.size || sha256.Sum256(data) != a.hash {
				return nil
			}
			en.files = append(en.files, wsFile{path: p, mode: a.mode, data: data})
			en.bytes += int64(len(data)) + int64(len(p))
			if en.bytes > maxEntryBytes {
				return nil
			}
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			en.removed = append(en.removed, p)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(en.removed))) // children before parents
	return en
}

// instrumenterKind names an instrumenter whose output is a function of
// the source and the nonce ("" for any other, such as an LLM's: runs
// through it are not cached).
func instrumenterKind(in Instrumenter) string {
	if k, ok := in.(interface{ execCacheKind() string }); ok {
		return k.execCacheKind()
	}
	return ""
}

func (StaticInstrumenter) execCacheKind() string { return "static" }
func (NoInstrumenter) execCacheKind() string     { return "none" }
