package serve

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mlerl/mlerl/env"
)

// BenchmarkServeEnv is the bounded load test: per iteration, 64 requests
// from 8 concurrent clients over loopback, 56 cheap ones (List Files:
// restore + list) and 8 Execute Script (restore + run + grade), against a
// server with its default concurrency (one action per core) and queue.
// It reports throughput and latency percentiles per kind. Run it with
//
//	GOEXPERIMENT=simd go test ./serve -run '^$' -bench ServeEnv -benchtime 3x
func BenchmarkServeEnv(b *testing.B) {
	const clients, cheap, exec = 8, 56, 8
	_, ts, _ := testServer(b, func(c *Config) { c.Concurrency, c.Warm = 0, true })
	type job struct {
		kind string
		req  StepRequest
	}
	var jobs []job
	for i := 0; i < cheap+exec; i++ {
		st := []string{state0.StateID, state1.StateID}[i%2]
		if i%((cheap+exec)/exec) == 0 {
			jobs = append(jobs, job{"execute", StepRequest{StateID: st, Action: act(env.ExecuteScript, "train.py")}})
		} else {
			jobs = append(jobs, job{"list", StepRequest{StateID: st, Action: act(env.ListFiles, ".")}})
		}
	}
	lat := map[string][]time.Duration{}
	var mu sync.Mutex
	var wall time.Duration
	fails := 0
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		next := make(chan job)
		var wg sync.WaitGroup
		start := time.Now()
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range next {
					t0 := time.Now()
					var got StepResponse
					code := post(b, ts.URL, j.req, &got)
					d := time.Since(t0)
					mu.Lock()
					if code != http.StatusOK {
						fails++
					}
					lat[j.kind] = append(lat[j.kind], d)
					lat["all"] = append(lat["all"], d)
					mu.Unlock()
				}
			}()
		}
		for _, j := range jobs {
			next <- j
		}
		close(next)
		wg.Wait()
		wall += time.Since(start)
	}
	b.StopTimer()
	if fails > 0 {
		b.Fatalf("%d requests failed", fails)
	}
	b.ReportMetric(float64(len(lat["all"]))/wall.Seconds(), "req/s")
	for _, kind := range []string{"list", "execute"} {
		d := lat[kind]
		slices.Sort(d)
		for _, p := range []int{50, 95, 99} {
			b.ReportMetric(float64(d[(len(d)-1)*p/100].Microseconds())/1000, fmt.Sprintf("%s_p%d_ms", kind, p))
		}
	}
}
