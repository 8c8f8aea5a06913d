package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"fusion/internal/testenv"
	"fusion/node"
	"fusion/node/nodetest"
)

// embedModel is the embedding model of the /mcp tests.
const embedModel = "minilm"

// mcpServerNode starts a node whose models are the demo chat model and
// all-MiniLM-L6-v2.
func mcpServerNode(t *testing.T) *node.Node {
	t.Helper()
	models := nodetest.Models(t)
	if err := os.Symlink(testenv.EmbeddingModelDir(t, "all-minilm-l6-v2"), filepath.Join(models, embedModel)); err != nil {
		t.Fatal(err)
	}
	return nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models})
}

// bearer adds the API key to every request.
type bearer struct {
	key  string
	base http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.base.RoundTrip(r)
}

// mcpClient connects the official Go SDK's client to n's /mcp with key.
func mcpClient(t *testing.T, n *node.Node, key string) (*sdk.ClientSession, error) {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "fusion-test", Version: "1"}, nil)
	tr := &sdk.StreamableClientTransport{Endpoint: n.URL() + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{key, http.DefaultTransport}}}
	s, err := c.Connect(t.Context(), tr, nil)
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

// callJSON calls a tool and decodes its structured content into out.
func callJSON(t *testing.T, s *sdk.ClientSession, name string, args map[string]any, out any) *sdk.CallToolResult {
	t.Helper()
	res, err := s.CallTool(t.Context(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if out != nil && !res.IsError {
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, raw, err)
		}
	}
	return res
}

// greedyChatText is the text of a greedy chat completion of prompt.
func greedyChatText(t *testing.T, n *node.Node, prompt string, maxTokens int) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": nodetest.Model, "messages": []any{map[string]any{"role": "user", "content": prompt}},
		"max_tokens": maxTokens, "temperature": 0})
	code, raw := apiDo(t, n, http.MethodPost, "/v1/chat/completions", string(body))
	var doc struct {
		Choices []struct{ Message struct{ Content string } }
	}
	if code != 200 || json.Unmarshal(raw, &doc) != nil || len(doc.Choices) != 1 {
		t.Fatalf("chat: %d %s", code, raw)
	}
	return doc.Choices[0].Message.Content
}

// embeddings are /v1/embeddings' vectors of texts.
func embeddings(t *testing.T, n *node.Node, texts []string) [][]float32 {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": embedModel, "input": texts})
	code, raw := apiDo(t, n, http.MethodPost, "/v1/embeddings", string(body))
	var doc struct {
		Data []struct{ Embedding []float32 }
	}
	if code != 200 || json.Unmarshal(raw, &doc) != nil {
		t.Fatalf("embeddings: %d %s", code, raw)
	}
	var out [][]float32
	for _, d := range doc.Data {
		out = append(out, d.Embedding)
	}
	return out
}

// TestMCPServerGoClient: the official Go SDK's client uses fusion's /mcp
// (behind the API key): list_models lists both kinds, generate answers
// what a greedy chat completion answers, embed gives /v1/embeddings'
// vectors, and bad input is a tool error naming the problem.
func TestMCPServerGoClient(t *testing.T) {
	n := mcpServerNode(t)
	if _, err := mcpClient(t, n, "wrong"); err == nil {
		t.Error("a wrong key connected to /mcp")
	}
	s, err := mcpClient(t, n, "k")
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"embed", "generate", "list_models"}) {
		t.Errorf("tools %v", names)
	}

	var models struct {
		Models []struct {
			ID, Kind string
		}
	}
	callJSON(t, s, "list_models", nil, &models)
	kinds := map[string]string{}
	for _, m := range models.Models {
		kinds[m.ID] = m.Kind
	}
	if kinds[nodetest.Model] != "chat" || kinds[embedModel] != "embedding" {
		t.Errorf("list_models: %+v", models)
	}

	var out struct {
		Text             string `json:"text"`
		FinishReason     string `json:"finish_reason"`
		CompletionTokens int    `json:"completion_tokens"`
	}
	res := callJSON(t, s, "generate", map[string]any{"model": nodetest.Model, "prompt": "Say hello.", "max_tokens": 8, "temperature": 0}, &out)
	if res.IsError || out.CompletionTokens < 1 || (out.FinishReason != "stop" && out.FinishReason != "length") {
		t.Fatalf("generate: %+v %+v", res, out)
	}
	if want := greedyChatText(t, n, "Say hello.", 8); out.Text != want {
		t.Errorf("generate %q, the chat completion %q", out.Text, want)
	}
	if tc, ok := res.Content[0].(*sdk.TextContent); !ok || tc.Text != out.Text {
		t.Errorf("generate's text content %v", res.Content)
	}

	texts := []string{"the cat sat", "on the mat"}
	var emb struct {
		Embeddings [][]float32 `json:"embeddings"`
	}
	if res := callJSON(t, s, "embed", map[string]any{"model": embedModel, "input": texts}, &emb); res.IsError {
		t.Fatalf("embed: %v", res.Content)
	}
	if want := embeddings(t, n, texts); fmt.Sprint(emb.Embeddings) != fmt.Sprint(want) || len(emb.Embeddings) != 2 || len(emb.Embeddings[0]) != 384 {
		t.Errorf("embed's vectors differ from /v1/embeddings' (%d vectors)", len(emb.Embeddings))
	}

	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"generate", map[string]any{"model": "nope", "prompt": "x"}, "nope"},
		{"generate", map[string]any{"model": nodetest.Model}, "prompt"},
		{"generate", map[string]any{"model": nodetest.Model, "prompt": "x", "temperature": 7}, "temperature"},
		{"generate", map[string]any{"model": nodetest.Model, "messages": []any{map[string]any{"role": "wizard", "content": "x"}}}, "role"},
		{"embed", map[string]any{"model": nodetest.Model, "input": []any{"x"}}, "embedding"},
		{"embed", map[string]any{"model": embedModel, "input": []any{}}, "input"},
	} {
		res, err := s.CallTool(t.Context(), &sdk.CallToolParams{Name: tc.tool, Arguments: tc.args})
		if err != nil {
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s %v: %v, want it to name %q", tc.tool, tc.args, err, tc.want)
			}
			continue
		}
		text := ""
		if len(res.Content) > 0 {
			if tc, ok := res.Content[0].(*sdk.TextContent); ok {
				text = tc.Text
			}
		}
		if !res.IsError || !strings.Contains(text, tc.want) {
			t.Errorf("%s %v: is_error %v %q, want an error naming %q", tc.tool, tc.args, res.IsError, text, tc.want)
		}
	}
}

// TestMCPServerPythonClient runs the official Python mcp package's
// streamable HTTP client against /mcp.
func TestMCPServerPythonClient(t *testing.T) {
	py := testenv.Python(t)
	n := mcpServerNode(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "mcp_client.py"), n.URL()+"/mcp", "k", nodetest.Model, embedModel)
	raw, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("mcp_client.py: %v\n%s\n%s", err, raw, stderr)
	}
	var got struct {
		Tools      []string    `json:"tools"`
		Models     []string    `json:"models"`
		Text       string      `json:"text"`
		Embeddings [][]float32 `json:"embeddings"`
		BadModel   string      `json:"bad_model"`
		NoKey      string      `json:"no_key"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("mcp_client.py printed %s", raw)
	}
	slices.Sort(got.Tools)
	if !slices.Equal(got.Tools, []string{"embed", "generate", "list_models"}) {
		t.Errorf("tools %v", got.Tools)
	}
	if !slices.Contains(got.Models, nodetest.Model) || !slices.Contains(got.Models, embedModel) {
		t.Errorf("models %v", got.Models)
	}
	if want := greedyChatText(t, n, "Say hello.", 8); got.Text != want {
		t.Errorf("generate %q, the chat completion %q", got.Text, want)
	}
	if want := embeddings(t, n, []string{"the cat sat"}); fmt.Sprint(got.Embeddings) != fmt.Sprint(want) {
		t.Errorf("embed's vectors differ from /v1/embeddings'")
	}
	if !strings.Contains(got.BadModel, "nope") {
		t.Errorf("unknown model: %q", got.BadModel)
	}
	if !strings.Contains(got.NoKey, "401") {
		t.Errorf("no key: %q", got.NoKey)
	}
}
