package node

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"fusion/jobs"
	"fusion/router/admin"
)

// TestDownloadsToResume: a node starts again its downloads that a stop or
// restart interrupted (or that are still live in the records, made
// before it started: being marked), counting the times in a row, and not
// those cancelled, done, of another node, of a placement, asked again or
// resumed since, or resumed max times already.
func TestDownloadsToResume(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	started := t0.Add(time.Hour)
	job := func(id, node, state string, minute int, req admin.DownloadRequest) jobs.Job {
		p, _ := json.Marshal(req)
		return jobs.Job{ID: id, Kind: "download", Node: node, State: state, Created: t0.Add(time.Duration(minute) * time.Minute), Params: p}
	}
	r := func(repo string) admin.DownloadRequest {
		return admin.DownloadRequest{Repo: repo, Allow: []string{"*.json"}}
	}
	resumed := func(repo, of string, n int) admin.DownloadRequest {
		q := r(repo)
		q.Resumes, q.ResumeCount = of, n
		return q
	}
	list := []jobs.Job{
		job("j1", "a", jobs.Interrupted, 1, r("o/interrupted")),
		job("j2", "a", jobs.Running, 2, r("o/live-before-start")),
		job("j3", "a", jobs.Cancelled, 3, r("o/cancelled")),
		job("j4", "a", jobs.Done, 4, r("o/done")),
		job("j5", "b", jobs.Interrupted, 5, r("o/other-node")),
		job("j6", "a", jobs.Interrupted, 6, admin.DownloadRequest{Repo: "o/placement", Placement: &admin.DownloadPlacement{Replicas: 2}}),
		job("j7", "a", jobs.Interrupted, 7, r("o/asked-again")),
		job("j8", "a", jobs.Done, 8, r("o/asked-again")),
		job("j9", "a", jobs.Interrupted, 9, resumed("o/twice", "j0", 2)),
		job("j10", "a", jobs.Interrupted, 10, resumed("o/once", "j0", 1)),
		{ID: "j11", Kind: "quantize", Node: "a", State: jobs.Interrupted, Created: t0, Params: []byte(`{"model":"m"}`)},
	}
	for _, tc := range []struct {
		max  int
		want []string // "resumed job:count"
	}{
		{0, nil},
		{1, []string{"j1:1", "j2:1"}},
		{2, []string{"j1:1", "j2:1", "j10:2"}},
		{3, []string{"j1:1", "j2:1", "j9:3", "j10:2"}},
	} {
		var got []string
		for _, q := range downloadsToResume(list, "a", started, tc.max) {
			got = append(got, q.Resumes+":"+string(rune('0'+q.ResumeCount)))
			if q.Repo == "" || len(q.Allow) != 1 {
				t.Errorf("max %d: request %+v lost its fields", tc.max, q)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("max %d: resumed %v, want %v", tc.max, got, tc.want)
		}
	}
}
