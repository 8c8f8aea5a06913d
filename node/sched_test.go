package node_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"fusion/node/nodetest"
)

// TestQueueFull429: past max-queued, both dialects answer 429 in their
// error shape with a Retry-After header; no request hangs and every
// admitted one completes.
func TestQueueFull429(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{MaxQueued: 4, MaxRunning: 2})
	bias := noEOSBias(t, n.URL())
	client := &http.Client{Timeout: 2 * time.Minute} // a hang fails the test
	type result struct {
		status     int
		retryAfter string
		errType    string
		tokens     int
	}
	const total = 16
	results := make([]result, total)
	var wg sync.WaitGroup
	for i := range total {
		wg.Go(func() {
			var path, body string
			if i%2 == 0 {
				path = "/v1/chat/completions"
				body = `{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":200,"logit_bias":` + bias + `}`
			} else {
				path = "/v1/messages"
				body = `{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":200}`
			}
			req, _ := http.NewRequest("POST", n.URL()+path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var doc struct {
				Error struct{ Type string } `json:"error"`
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
					OutputTokens     int `json:"output_tokens"`
				} `json:"usage"`
			}
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Errorf("request %d: %d %s", i, resp.StatusCode, b)
			}
			results[i] = result{resp.StatusCode, resp.Header.Get("Retry-After"), doc.Error.Type, doc.Usage.CompletionTokens + doc.Usage.OutputTokens}
		})
	}
	wg.Wait()
	ok, refused := 0, 0
	for i, r := range results {
		switch r.status {
		case http.StatusOK:
			ok++
			if r.tokens == 0 {
				t.Errorf("request %d: admitted but produced nothing: %+v", i, r)
			}
		case http.StatusTooManyRequests:
			refused++
			if s, err := strconv.Atoi(r.retryAfter); err != nil || s < 1 || r.errType != "rate_limit_error" {
				t.Errorf("request %d: 429 with Retry-After %q, error type %q", i, r.retryAfter, r.errType)
			}
		default:
			t.Errorf("request %d: %+v", i, r)
		}
	}
	t.Logf("%d requests at max-queued 4: %d completed, %d refused with 429", total, ok, refused)
	if ok < 4 || refused == 0 || ok+refused != total {
		t.Errorf("completed %d, refused %d of %d", ok, refused, total)
	}
	if st := n.Runner().Stats(); st.InFlight != 0 || st.Running != 0 || st.MaxBatch < 2 {
		t.Errorf("runner after the burst: %+v", st)
	}
}
