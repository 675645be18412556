package shard

import (
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	cases := []struct {
		name    string
		flag    string
		env     map[string]string
		want    Shard
		wantErr string
	}{
		{name: "nothing", want: All},
		{name: "flag", flag: "2/3", want: Shard{2, 3}},
		{name: "flag with spaces", flag: " 1 / 4", want: Shard{1, 4}},
		{name: "flag wins over env", flag: "0/2", env: map[string]string{EnvIndex: "5", EnvCount: "8"}, want: Shard{0, 2}},
		{name: "env", env: map[string]string{EnvIndex: "5", EnvCount: "8"}, want: Shard{5, 8}},
		{name: "env single", env: map[string]string{EnvIndex: "0", EnvCount: "1"}, want: All},
		{name: "flag index too big", flag: "3/3", wantErr: "0 <= i < K"},
		{name: "flag no slash", flag: "3", wantErr: "want i/K"},
		{name: "flag zero count", flag: "0/0", wantErr: "want i/K"},
		{name: "flag negative", flag: "-1/3", wantErr: "want i/K"},
		{name: "index without count", env: map[string]string{EnvIndex: "1"}, wantErr: "MLERL_SHARDS is not"},
		{name: "count without index", env: map[string]string{EnvCount: "4"}, wantErr: "JOB_COMPLETION_INDEX is not"},
		{name: "index beyond count", env: map[string]string{EnvIndex: "4", EnvCount: "4"}, wantErr: "disagree"},
		{name: "bad index", env: map[string]string{EnvIndex: "x", EnvCount: "4"}, wantErr: "non-negative integer"},
		{name: "bad count", env: map[string]string{EnvIndex: "0", EnvCount: "0"}, wantErr: "positive integer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Resolve(c.flag, func(k string) string { return c.env[k] })
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got %v, %v want error containing %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %v, %v want %v", got, err, c.want)
			}
		})
	}
}

// Every item belongs to exactly one shard, and Parse reads String.
func TestOwnsPartitions(t *testing.T) {
	for k := 1; k <= 5; k++ {
		for n := 0; n < 23; n++ {
			owners := 0
			for i := 0; i < k; i++ {
				s := Shard{i, k}
				if s.Owns(n) {
					owners++
				}
				if p, err := Parse(s.String()); err != nil || p != s {
					t.Fatalf("Parse(%q): got %v, %v want %v", s.String(), p, err, s)
				}
			}
			if owners != 1 {
				t.Fatalf("item %d of %d shards: got %d owners, want 1", n, k, owners)
			}
		}
	}
}
