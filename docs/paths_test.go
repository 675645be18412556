package docs

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// absPath finds an absolute path where a shell, a config or a reader
// would take it as one: a slash starting a word (after a space, =, an
// opening bracket, a comma, a colon as in hf:/x or data:/x, a pipe or a
// redirection such as 2>/x, and an optional opening quote or backtick).
// A slash inside a word (a/b, $D/x, "$D"/x, <root>/x) and a URL's path
// (gs://b/x, https://h/x) start no match.
var absPath = regexp.MustCompile("(?:^|[\\s=(\\[{,;:|]|(?:^|[\\s\\d&])>)[\"'`]?(/[A-Za-z0-9._-][^\\s\"'`)\\]},;|*]*)")

// fsRoots are top-level folders of a Linux machine, the FHS's and those
// machines keep data and checkouts in: a one-component path (/work) is a
// path only when it names one of these; /healthz, /1.5 or /report.md in
// prose are not.
var fsRoots = map[string]bool{}

func init() {
	for _, r := range strings.Fields("bin boot dev etc home lib lib64 media mnt opt proc root run sbin srv sys tmp usr var " +
		"work data scratch workspace content kaggle nfs gpfs lustre Users Volumes") {
		fsRoots[r] = true
	}
}

// systemPaths are absolute paths that mean the same on every machine
// mlerl runs on, allowed in every checked file:
//   - /usr, /bin, /sbin, /lib, /lib64: the operating system's programs and
//     libraries (/usr/bin/python3, which the tasks run with; /usr/bin/time,
//     which the run scripts time stages with; OpenBLAS);
//   - /etc: the system's configuration (/etc/locale.gen in the image);
//   - /proc, /sys, /dev: the kernel's interfaces (/proc/loadavg in every
//     run log's header, /dev/null, the sandbox's private /dev/shm);
//   - /tmp: the system's temporary folder, which exists everywhere and
//     holds nothing of a run's (mktemp -d /tmp/..., a throwaway file in a
//     code sample);
//   - /path/to/...: the documentation placeholder for the reader's own.
var systemPaths = []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/proc", "/sys", "/dev", "/tmp", "/path/to"}

// routes are the HTTP routes `mlerl serve-env` serves, which the
// runbook, the verl adapter and the manifests name: URL paths, not files.
var routes = []string{"/v1/step", "/healthz", "/readyz"}

// containerPaths are the container image's own layout (scripts/
// Containerfile: its build stages' /deps, /src and /out, the installed
// /opt/mlerl, the workspaces' /scratch, apt's lists it deletes) and the
// pods' mounts (the token Secret under /var/run/secrets): they exist in
// every container made from the recipe, whatever the host. Allowed only in
// the files that build or run the image (containerFile).
var containerPaths = []string{"/opt/mlerl", "/scratch", "/var/run/secrets", "/var/lib/apt/lists", "/deps", "/src", "/out"}

func containerFile(rel string) bool {
	return rel == "scripts/Containerfile" || rel == "scripts/RUNBOOK.md" || strings.HasPrefix(rel, "scripts/k8s/")
}

// under reports whether p is dir or inside it.
func under(p string, dirs ...string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// machinePaths returns the absolute paths of a line of file rel that name
// a machine's own folders: every path absPath finds, but for those that
// are no path (one component, not a top-level folder) and those allowed
// (systemPaths, routes, containerPaths in the container files).
func machinePaths(rel, line string) []string {
	var out []string
	for _, m := range absPath.FindAllStringSubmatch(line, -1) {
		p := strings.TrimRight(m[1], ".:") // the end of a sentence or a label
		comps := strings.Split(strings.Trim(p, "/"), "/")
		switch {
		case len(comps) < 2 && !fsRoots[comps[0]]:
		case under(p, systemPaths...), under(p, routes...):
		case containerFile(rel) && under(p, containerPaths...):
		default:
			out = append(out, p)
		}
	}
	return out
}

// checked says whether the path test reads file rel: everything under
// docs/ and scripts/, and every Markdown file, YAML or TOML config,
// Makefile and container recipe elsewhere, but testdata/ (fixtures
// recorded verbatim from other tools: LLaMA-Factory's adapter_config.json
// keeps the trainer's absolute base model path on purpose, see
// policy/hf/llamafactory_test.go), this package's own Go files (their
// examples are the paths the test must flag) and recorded output.
func checked(rel string) bool {
	if strings.Contains("/"+rel, "/testdata/") || (path.Dir(rel) == "docs" && path.Ext(rel) == ".go") {
		return false
	}
	base := path.Base(rel)
	switch {
	case strings.HasPrefix(rel, "docs/"), strings.HasPrefix(rel, "scripts/"):
		return true
	case base == "Makefile", base == "Containerfile", base == "Dockerfile":
		return true
	}
	switch path.Ext(rel) {
	case ".md", ".yaml", ".yml", ".toml":
		return true
	}
	return false
}

// reportHeadings are the first lines of the reports mlerl writes
// (evaluate/report.go, experiment/report.go), which run scripts copy
// into docs/ as the runs wrote them.
var reportHeadings = map[string]string{
	"evaluate/report.go":   "# Evaluation report\n",
	"experiment/report.go": "# Experiment ",
}

// recorded says whether a checked file is a record of what a run printed
// or wrote, kept verbatim as history: its paths are the run machine's,
// as they were, and name nothing a reader runs. These are, under docs/,
// the .txt, .log, .jsonl, .tsv and .json files (stdout and time logs,
// bench tables, rows, selections) but docs/current-result.txt, which a
// person writes and the demo prints; and anywhere, a Markdown report
// mlerl wrote (its first line is one of reportHeadings').
func recorded(rel, content string) bool {
	switch path.Ext(rel) {
	case ".txt", ".log", ".jsonl", ".tsv", ".json":
		return strings.HasPrefix(rel, "docs/") && rel != "docs/current-result.txt"
	case ".md":
		for _, h := range reportHeadings {
			if strings.HasPrefix(content, h) {
				return true
			}
		}
	}
	return false
}

// TestNoMachinePaths: no committed script, config or document names an
// absolute path of the machine it was written on (a data root, a
// checkout, a home folder): a run's scripts and configs take their data
// root and binary as arguments or variables, and documents write the
// run machine's folder as a variable ($RUNS in SCIENCE.md and
// BENCHMARKS.md). Records of past runs' output are history and stay as
// they were written.
func TestNoMachinePaths(t *testing.T) {
	for src, h := range reportHeadings {
		b, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("%q", h); !strings.Contains(string(b), strings.TrimSuffix(want, `"`)) {
			t.Errorf("%s no longer writes a report starting %q: update reportHeadings so that copied reports are still told apart", src, h)
		}
	}
	files, n := committed(t), 0
	for _, rel := range files {
		if !checked(rel) {
			continue
		}
		content, ok := text(t, rel)
		if !ok || recorded(rel, content) {
			continue
		}
		n++
		for i, line := range strings.Split(content, "\n") {
			for _, p := range machinePaths(rel, line) {
				t.Errorf("%s:%d: %s is a machine's own folder: take it as an argument or variable (a folder under the checkout or $DATA by default), or write $RUNS/... for a past run's in a document", rel, i+1, p)
			}
		}
	}
	if n < 50 {
		t.Errorf("checked %d files of %d committed: the file list is wrong", n, len(files))
	}
}

// TestMachinePathsFinds pins what the path test flags and what it lets
// through, so that a change to its rules shows here.
func TestMachinePathsFinds(t *testing.T) {
	cases := []struct {
		file, line string
		want       []string
	}{
		{"docs/run16/run16.yaml", "data: /work/data/run16/root", []string{"/work/data/run16/root"}},
		{"docs/run16/chain.sh", `ROOT=/work/data/run16/root`, []string{"/work/data/run16/root"}},
		{"scripts/x.sh", `"$BIN" head > /home/me/rows.jsonl 2>/dev/null`, []string{"/home/me/rows.jsonl"}},
		{"README.md", "`--policy hf:/models/qwen` and `cd /root`", []string{"/models/qwen", "/root"}},
		{"SCIENCE.md", "data root (`/mnt/runs/sci9`).", []string{"/mnt/runs/sci9"}},
		{"docs/x.sh", `W=/work`, []string{"/work"}},
		{"README.md", "scripts/k8s mounts /opt/mlerl", []string{"/opt/mlerl"}}, // container paths only in container files
		{"scripts/k8s/serve-env.yaml", "mountPath: /opt/mlerl/scripts", nil},
		{"scripts/Containerfile", "workspaces go under /scratch.", nil},
		{"docs/x.sh", `/usr/bin/time -v $B > "$RUNS/x.log" 2>&1; cat /proc/loadavg /dev/null`, nil},
		{"docs/x.sh", `mktemp -d /tmp/mlerl-XXXXXX; mlerl evaluate --data "$D"/root`, nil},
		{"docs/x.md", "gs://bucket/data/x, https://host/work/x, file:///work/x, <root>/_blobs/sha256/x, $RUNS/run13/root", nil},
		{"docs/x.md", "`POST /v1/step`, GET /healthz, x /1.5 below, `docs/run15/seed-<S>/report.md`, </think>", nil},
		{"scripts/gpu_check.sh", `GOMLX_BACKEND=xla:/path/to/plugin.so`, nil},
	}
	for _, c := range cases {
		got := machinePaths(c.file, c.line)
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%s: %q: got %q, want %q", c.file, c.line, got, c.want)
		}
	}
	for rel, want := range map[string]bool{"docs/run16/chain.sh": true, "scripts/k8s/cronjob.yaml": true, "tasks/titanic-survival/task.yaml": true,
		"README.md": true, "Makefile": true, "policy/hf/testdata/lora/qwen2/adapter/README.md": false, "env/env.go": false,
		"docs/paths_test.go": false, "scripts/k8s/manifests_test.go": true} {
		if checked(rel) != want {
			t.Errorf("checked(%s) = %v, want %v", rel, !want, want)
		}
	}
	for _, c := range []struct {
		rel, content string
		want         bool
	}{
		{"docs/run16/seed-61/grid-stdout.txt", "", true},
		{"docs/current-result.txt", "", false},
		{"docs/run16/seed-61/report.md", "# Experiment run16-s61\n", true},
		{"docs/suite62/expert-held-out-report.md", "# Evaluation report\n\nResults:", true},
		{"SCIENCE.md", "# Science: ...\n", false},
		{"scripts/x.json", "", false},
	} {
		if recorded(c.rel, c.content) != c.want {
			t.Errorf("recorded(%s) = %v, want %v", c.rel, !c.want, c.want)
		}
	}
}
