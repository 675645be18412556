package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"time"
)

// MemProfileEnv names a file that receives the command's heap profile at
// its peak (go tool pprof reads it; -sample_index=inuse_space shows what
// held the memory then, as of the garbage collection before it): where a
// stage's memory goes, for any stage.
const MemProfileEnv = "MLERL_MEMPROFILE"

// memPeakEvery is how often the heap is read for a new peak.
const memPeakEvery = 5 * time.Second

// startMemProfile writes a heap profile into path each time the heap in
// use passes its last written peak by a tenth (read every memPeakEvery)
// and once more as the command ends, when that is its peak (nothing when
// path is empty); it returns the function that ends it. A path that cannot
// be created is an error before the command starts.
func startMemProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	// Try the path now, so a typo stops the command before it runs.
	f, err := createProfile(MemProfileEnv, path)
	if err != nil {
		return nil, err
	}
	f.Close()
	var peak uint64
	write := func(force bool) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if !force && ms.HeapInuse <= peak+peak/10 || force && ms.HeapInuse < peak {
			return
		}
		peak = ms.HeapInuse
		tmp := path + ".tmp"
		f, err := os.Create(tmp)
		if err == nil {
			err = pprof.Lookup("heap").WriteTo(f, 0)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err == nil {
			err = os.Rename(tmp, path)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "mlerl: %s: writing %s: %v\n", MemProfileEnv, path, err)
		}
	}
	write(true)
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(memPeakEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				write(false)
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		write(true)
	}, nil
}
