package experiment

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"
)

// A cell's stage interrupted and resumed (a signal, the end of a machine's
// loan, a crash) runs as several processes, its legs; the row's cost is
// what all of them took, not the last one. Each stage keeps a ledger
// beside its log, logs/<stage>.usage.json, keyed by the grid's pending
// version: a new version of the grid starts its ledgers, and its logs,
// afresh. While a leg runs, its ledger holds what it has taken so far
// (every ledgerEvery), so a leg killed before it could write (SIGKILL, a
// machine that went away) still counts, up to its last write.

// ledgerEvery is how often a running leg's usage is written.
var ledgerEvery = 30 * time.Second

// ledger is a stage's usage over its legs.
type ledger struct {
	Version string  `json:"version"` // the grid's pending version the legs belong to
	Legs    int     `json:"legs"`    // legs summed in WallS and CPUS
	WallS   float64 `json:"wall_s"`
	CPUS    float64 `json:"cpu_s"`
	// Running is the leg in progress as of its last write; a ledger read
	// with it set belongs to a leg that never finished (it was killed).
	Running *legUsage `json:"running,omitempty"`
}

type legUsage struct {
	Started time.Time `json:"started"`
	WallS   float64   `json:"wall_s"`
	CPUS    float64   `json:"cpu_s"`
}

// readLedger returns the ledger at path for version: a fresh one when
// there is none or it belongs to another version (fresh is true then),
// and an unfinished leg folded into the sums (killed is true then). A
// ledger that cannot be read is an error beside an empty, not fresh,
// ledger: the stage goes on and its log keeps the earlier legs.
func readLedger(path, version string) (l ledger, fresh, killed bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return ledger{Version: version}, true, false, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &l)
	}
	if err != nil { // not fresh: the log of the earlier legs is kept
		return ledger{Version: version}, false, false, fmt.Errorf("%s: %v (its earlier legs are not counted; delete it to silence this)", path, err)
	}
	if l.Version != version {
		return ledger{Version: version}, true, false, nil
	}
	if r := l.Running; r != nil {
		l.addLeg(r.WallS, r.CPUS)
		l.Running = nil
		killed = true
	}
	return l, false, killed, nil
}

// write replaces the ledger at path (whole: a reader never sees half).
func (l ledger) write(path string) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// addLeg counts one more leg, of wallS and cpuS seconds.
func (l *ledger) addLeg(wallS, cpuS float64) {
	l.Legs, l.WallS, l.CPUS = l.Legs+1, l.WallS+wallS, l.CPUS+cpuS
}

// usage is what every leg counted so far took.
func (l ledger) usage() usage { return usage{wallS: l.WallS, cpuS: l.CPUS} }

// clockTicks is /proc's unit of CPU time (USER_HZ, 100 on Linux).
const clockTicks = 100

// procCPUSeconds is the CPU time, user and system, of process pid and of
// the children it has waited for (its scripts), from /proc; 0 where
// /proc cannot say (another OS, the process gone).
func procCPUSeconds(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command's closing parenthesis: state is the
	// 3rd field of the line, utime, stime, cutime and cstime the 14th to
	// 17th.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return 0
	}
	var ticks float64
	for _, x := range f[11:15] {
		v, err := strconv.ParseFloat(x, 64)
		if err != nil {
			return 0
		}
		ticks += v
	}
	return ticks / clockTicks
}
