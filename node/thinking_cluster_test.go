package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"fusion/cluster"
	"fusion/cluster/fsm"
	"fusion/node"
	"fusion/node/nodetest"
)

// TestClusterThinkingSignature: a thinking block signed by one node's
// frontend verifies on the other's, in both directions, with the cluster
// key derived from the cluster secret or, without one, generated once and
// replicated through the log (and then not readable through the settings
// API). An edited block is refused on either node.
func TestClusterThinkingSignature(t *testing.T) {
	for _, tt := range []struct {
		name, secret string
	}{
		{"secret", "s"},
		{"no secret", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			models := nodetest.Models(t)
			nodetest.AddThinker(t, models)
			ca := nodetest.Member("a", 1, nil)
			ca.Secret = tt.secret
			a := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, Cluster: ca})
			cb := nodetest.Member("b", 0, []string{a.Cluster().GossipAddr()})
			cb.Secret = tt.secret
			// b has no model: its generations run on a, its frontend signs.
			b := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: t.TempDir(), Cluster: cb})
			clients := map[*node.Node]*ant.Client{}
			for _, n := range []*node.Node{a, b} {
				c := ant.NewClient(option.WithBaseURL(n.URL()), option.WithAPIKey("k"), option.WithMaxRetries(0))
				clients[n] = &c
			}
			client := func(n *node.Node) *ant.Client { return clients[n] }
			ctx := context.Background()
			params := ant.MessageNewParams{Model: nodetest.Thinker, MaxTokens: 1030, Messages: []ant.MessageParam{
				ant.NewUserMessage(ant.NewTextBlock("Weather in Paris?"))}, Thinking: ant.ThinkingConfigParamOfEnabled(1024)}
			var fromB *ant.Message
			waitUntil(t, 20*time.Second, "b to serve the thinker", func() bool {
				m, err := client(b).Messages.New(ctx, params)
				fromB = m
				return err == nil
			})
			fromA, err := client(a).Messages.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				signer, checker *node.Node
				msg             *ant.Message
			}{{a, b, fromA}, {b, a, fromB}} {
				if len(c.msg.Content) < 1 || c.msg.Content[0].Type != "thinking" || c.msg.Content[0].Signature == "" {
					t.Fatalf("answer: %s", c.msg.RawJSON())
				}
				block := c.msg.Content[0]
				turn := func(thinking string) ant.MessageNewParams {
					return ant.MessageNewParams{Model: nodetest.Thinker, MaxTokens: 2, Messages: []ant.MessageParam{
						ant.NewUserMessage(ant.NewTextBlock("Weather in Paris?")),
						ant.NewAssistantMessage(ant.NewThinkingBlock(block.Signature, thinking), ant.NewTextBlock("Sunny.")),
						ant.NewUserMessage(ant.NewTextBlock("And tomorrow?"))}}
				}
				if _, err := client(c.checker).Messages.New(ctx, turn(block.Thinking)); err != nil {
					t.Errorf("a block signed on %s, sent to %s: %v", c.signer.Cluster().ID(), c.checker.Cluster().ID(), err)
				}
				_, err := client(c.checker).Messages.New(ctx, turn(block.Thinking+" Edited."))
				var apiErr *ant.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.RawJSON(), "Invalid `signature` in `thinking` block") {
					t.Errorf("an edited block, sent to %s: %v", c.checker.Cluster().ID(), err)
				}
			}

			ka, err := a.Cluster().Key(ctx, "thinking")
			if err != nil {
				t.Fatal(err)
			}
			kb, err := b.Cluster().Key(ctx, "thinking")
			if err != nil || !bytes.Equal(ka, kb) || len(ka) != cluster.KeyLen {
				t.Fatalf("keys: a %x, b %x, %v", ka, kb, err)
			}
			var stored bool
			a.Cluster().FSM().Read(func(s *fsm.State) { _, stored = s.Setting(cluster.KeyPrefix + "thinking") })
			if stored != (tt.secret == "") {
				t.Errorf("key in the replicated settings: %v", stored)
			}
			for _, method := range []string{http.MethodGet, http.MethodPut} {
				req, _ := http.NewRequest(method, a.URL()+"/admin/api/cluster/settings/"+cluster.KeyPrefix+"thinking", strings.NewReader(`{"value":"00"}`))
				req.Header.Set("Authorization", "Bearer k")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusForbidden {
					t.Errorf("%s of the key through the settings API: %d", method, resp.StatusCode)
				}
			}
		})
	}
}

// TestThinkingKeySurvivesRestart: a lone node keeps its signing key in its
// data directory (owner-only), so a block it signed verifies after a
// restart on the same data.
func TestThinkingKeySurvivesRestart(t *testing.T) {
	models := nodetest.Models(t)
	nodetest.AddThinker(t, models)
	data := t.TempDir()
	first := nodetest.Start(t, nodetest.Options{ModelsDir: models, DataDir: data})
	c := ant.NewClient(option.WithBaseURL(first.URL()), option.WithAPIKey("k"), option.WithMaxRetries(0))
	ctx := context.Background()
	msg, err := c.Messages.New(ctx, ant.MessageNewParams{Model: nodetest.Thinker, MaxTokens: 1030, Messages: []ant.MessageParam{
		ant.NewUserMessage(ant.NewTextBlock("Weather in Paris?"))}, Thinking: ant.ThinkingConfigParamOfEnabled(1024)})
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) < 1 || msg.Content[0].Signature == "" {
		t.Fatalf("answer: %s", msg.RawJSON())
	}
	if err := first.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(data, "keys", "thinking"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", fi, err)
	}
	again := nodetest.Start(t, nodetest.Options{ModelsDir: models, DataDir: data})
	c = ant.NewClient(option.WithBaseURL(again.URL()), option.WithAPIKey("k"), option.WithMaxRetries(0))
	block := msg.Content[0]
	_, err = c.Messages.New(ctx, ant.MessageNewParams{Model: nodetest.Thinker, MaxTokens: 2, Messages: []ant.MessageParam{
		ant.NewUserMessage(ant.NewTextBlock("Weather in Paris?")),
		ant.NewAssistantMessage(ant.NewThinkingBlock(block.Signature, block.Thinking), ant.NewTextBlock("Sunny.")),
		ant.NewUserMessage(ant.NewTextBlock("And tomorrow?"))}})
	if err != nil {
		t.Errorf("after a restart: %v", err)
	}
}

// TestThinkingKeyWithoutLeader: a member without a cluster secret that has
// never reached a leader has no key to sign or check thinking blocks
// with: /v1/messages answers 529 overloaded_error with Retry-After, not a
// 500 and not an unsigned block.
func TestThinkingKeyWithoutLeader(t *testing.T) {
	cc := nodetest.Member("alone", 2, nil) // waits for a second member that never comes
	cc.Secret = ""
	n := nodetest.Start(t, nodetest.Options{Cluster: cc})
	req, _ := http.NewRequest(http.MethodPost, n.URL()+"/v1/messages",
		strings.NewReader(`{"model":"demo","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Type  string
		Error struct{ Type, Message string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != 529 || resp.Header.Get("Retry-After") != "1" || body.Error.Type != "overloaded_error" ||
		!strings.Contains(body.Error.Message, "signs thinking blocks") {
		t.Errorf("%d (Retry-After %q) %+v", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}
