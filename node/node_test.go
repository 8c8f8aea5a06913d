package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"fusion/node/nodetest"
)

// noEOSBias is a logit_bias that keeps the demo model from ending (key:
// the node's API key, if any).
func noEOSBias(t *testing.T, url string, key ...string) string {
	t.Helper()
	var parts []string
	for _, s := range []string{"<|im_end|>", "<|endoftext|>"} {
		req, _ := http.NewRequest(http.MethodPost, url+"/tokenize", strings.NewReader(`{"model":"demo","add_special_tokens":false,"prompt":"`+s+`"}`))
		req.Header.Set("Content-Type", "application/json")
		if len(key) > 0 {
			req.Header.Set("Authorization", "Bearer "+key[0])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var r struct{ Tokens []int }
		json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if len(r.Tokens) != 1 {
			t.Fatalf("%q: %v", s, r.Tokens)
		}
		b, _ := json.Marshal(r.Tokens[0])
		parts = append(parts, `"`+string(b)+`":-100`)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// readChatStream reads the rest of a chat completion stream: its last data
// line, the finish_reason and the usage's completion_tokens (the request
// asks for include_usage). A stream that completes normally ends with
// "data: [DONE]" after max_tokens tokens. (Chunks are no count of tokens: a
// token that ends inside a UTF-8 character waits for the next one.)
func readChatStream(sc *bufio.Scanner) (last, finish string, tokens int) {
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		last = sc.Text()
		var c struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
			}
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		if json.Unmarshal([]byte(line), &c) != nil {
			continue
		}
		for _, ch := range c.Choices {
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
		if c.Usage != nil {
			tokens = c.Usage.CompletionTokens
		}
	}
	return last, finish, tokens
}

// TestDrainFinishesInFlight: Stop waits for a streamed generation that is
// running, which completes normally, while new connections are refused.
func TestDrainFinishesInFlight(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{DrainTimeout: 30 * time.Second})
	body := `{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":300,"stream":true,"stream_options":{"include_usage":true},"logit_bias":` + noEOSBias(t, n.URL()) + `}`
	resp, err := http.Post(n.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Scan() // the stream is running

	stopped := make(chan error, 1)
	go func() { stopped <- n.Stop(context.Background()) }()

	if last, finish, tokens := readChatStream(sc); last != "data: [DONE]" || finish != "length" || tokens != 300 {
		t.Errorf("stream cut during drain: finish %q after %d tokens, last %q", finish, tokens, last)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Stop: %v", err)
	}
	if _, err := http.Get(n.URL() + "/health"); err == nil {
		t.Error("the node still accepts connections after Stop")
	}
}

// TestDrainDeadline: a generation longer than the drain timeout is
// cancelled at the deadline, and Stop still returns cleanly.
func TestDrainDeadline(t *testing.T) {
	n := nodetest.Start(t, nodetest.Options{DrainTimeout: 100 * time.Millisecond})
	body := `{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":4096,"stream":true,"logit_bias":` + noEOSBias(t, n.URL()) + `}`
	resp, err := http.Post(n.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	bufio.NewReader(resp.Body).ReadString('\n')
	start := time.Now()
	if err := n.Stop(context.Background()); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Stop took %v", d)
	}
	if st := n.Runner().Stats(); st.InFlight != 0 {
		t.Errorf("runner in flight after Stop: %+v", st)
	}
}
