package openai_test

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"fusion/engine/embed/embedtest"
	"fusion/internal/testenv"
	"fusion/node"
	"fusion/node/nodetest"
)

// The reranking tests' cross-encoder and document cap.
const (
	rerankModel = "reranker"
	maxDocs     = 8
)

type rerankAnswer struct {
	Model   string `json:"model"`
	Results []struct {
		Index          int     `json:"index"`
		RelevanceScore float64 `json:"relevance_score"`
		Document       *struct {
			Text string `json:"text"`
		} `json:"document"`
		Truncated bool `json:"truncated"`
	} `json:"results"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
	Error *struct {
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Message string  `json:"message"`
	} `json:"error"`
}

// rerankModels is embeddingModels plus the cross-encoder fixture (the
// MiniLM encoder under a seeded one-label head) as "reranker".
func rerankModels(t *testing.T) (models, reranker string) {
	t.Helper()
	models, fixture := embeddingModels(t)
	reranker = filepath.Join(models, rerankModel)
	if err := embedtest.WriteCrossEncoder(fixture, reranker, 21); err != nil {
		t.Fatal(err)
	}
	return models, reranker
}

// forwardingCluster starts node a with the models and nodes b and c with
// none, joined into one cluster, and returns a and c once c forwards
// the warm-up request (path, body) to a.
func forwardingCluster(t *testing.T, models, path string, body any) (a, c *node.Node) {
	t.Helper()
	nodes := nodetest.StartCluster(t,
		nodetest.Options{APIKey: testKey, ModelsDir: models, MaxRerankDocs: maxDocs},
		nodetest.Options{APIKey: testKey, ModelsDir: t.TempDir(), MaxRerankDocs: maxDocs},
		nodetest.Options{APIKey: testKey, ModelsDir: t.TempDir(), MaxRerankDocs: maxDocs})
	a, c = nodes[0], nodes[2]
	var out struct {
		Error any `json:"error"`
	}
	if code := post(t, a, path, body, &out); code != http.StatusOK {
		t.Fatalf("warming %s on a: %d %+v", path, code, out.Error)
	}
	deadline := time.Now().Add(30 * time.Second)
	for post(t, c, path, body, &out) != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("c never forwarded %s to a: %+v", path, out.Error)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return a, c
}

// rerankCluster is forwardingCluster warmed with the reranker.
func rerankCluster(t *testing.T, models string) (a, c *node.Node) {
	t.Helper()
	return forwardingCluster(t, models, "/v1/rerank", map[string]any{"model": rerankModel, "query": "warm", "documents": []string{"up"}})
}

// TestRerank sends /v1/rerank (and /rerank) to the node that has the
// cross-encoder and to a node of its 3-node cluster that forwards over
// gRPC: the scores must equal sentence-transformers' CrossEncoder.predict
// on the same pairs (sigmoid activation, as the checkpoint says), ordered
// best first, cut to top_n, with the documents when asked and the usage
// counting every pair's tokens.
func TestRerank(t *testing.T) {
	py := testenv.Python(t)
	models, reranker := rerankModels(t)
	query := "how do vector databases find similar passages?"
	docs := []string{
		"A vector database stores embeddings and answers nearest-neighbour queries.",
		"The weather in Paris is mild in spring.",
		strings.Repeat("retrieval augmented generation ranks passages by relevance ", 90), // cut to 512 tokens
		"Approximate nearest neighbour indexes such as HNSW trade recall for speed.",
		"Der schnelle braune Fuchs springt über den faulen Hund.",
		"😀 emoji 👍🏽 🚀",
		"Cosine similarity compares the direction of two vectors.",
	}
	pairs := make([][2]string, len(docs))
	for i, d := range docs {
		pairs[i] = [2]string{query, d}
	}
	refs := embedtest.CrossEncoderReference(t, py, reranker, pairs)
	tokens := 0
	for _, r := range refs {
		tokens += len(r.IDs)
	}
	order := make([]int, len(docs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return -cmpFloat(refs[x].Score, refs[y].Score) })
	// The cluster starts after the reference, which takes minutes on a
	// loaded machine: the requests then follow the warm-up closely.
	a, c := rerankCluster(t, models)

	for _, n := range []struct {
		name string
		node *node.Node
		path string
	}{{"local", a, "/v1/rerank"}, {"forwarded", c, "/v1/rerank"}, {"alias", c, "/rerank"}} {
		for _, topN := range []int{0, 3} {
			body := map[string]any{"model": rerankModel, "query": query, "documents": docs, "return_documents": topN > 0}
			want := len(docs)
			if topN > 0 {
				body["top_n"], want = topN, topN
			}
			var out rerankAnswer
			if code := post(t, n.node, n.path, body, &out); code != http.StatusOK {
				t.Fatalf("%s top_n %d: status %d %+v", n.name, topN, code, out.Error)
			}
			if out.Model != rerankModel || len(out.Results) != want {
				t.Fatalf("%s top_n %d: model %q, %d results; want %q, %d", n.name, topN, out.Model, len(out.Results), rerankModel, want)
			}
			if out.Usage.PromptTokens != tokens || out.Usage.TotalTokens != tokens {
				t.Errorf("%s: usage %+v, want %d tokens (the pairs as CrossEncoder tokenizes them)", n.name, out.Usage, tokens)
			}
			worst := 0.0
			for k, r := range out.Results {
				if r.Index != order[k] {
					t.Errorf("%s: result %d is document %d, want %d (CrossEncoder's order)", n.name, k, r.Index, order[k])
				}
				d := math.Abs(r.RelevanceScore - refs[r.Index].Score)
				worst = max(worst, d)
				if d > 1e-5 {
					t.Errorf("%s: document %d scores %.7f, CrossEncoder %.7f", n.name, r.Index, r.RelevanceScore, refs[r.Index].Score)
				}
				if (r.Document != nil) != (topN > 0) || (r.Document != nil && r.Document.Text != docs[r.Index]) {
					t.Errorf("%s: document %d comes back as %+v (return_documents %v)", n.name, r.Index, r.Document, topN > 0)
				}
				if r.Truncated != (r.Index == 2) {
					t.Errorf("%s: document %d truncated=%v", n.name, r.Index, r.Truncated)
				}
			}
			t.Logf("%s %s top_n %d: largest score difference to CrossEncoder %.1e", n.name, n.path, topN, worst)
		}
	}
}

func cmpFloat(x, y float64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// TestRerankBadInput: every bad request is a 4xx in OpenAI's error shape,
// on the node with the models and through the forwarding node alike.
func TestRerankBadInput(t *testing.T) {
	models, _ := rerankModels(t)
	a, c := rerankCluster(t, models)
	docs := func(n int) string {
		d := make([]string, n)
		for i := range d {
			d[i] = "document"
		}
		b, _ := json.Marshal(d)
		return string(b)
	}
	long := strings.Repeat("long passage ", 400)
	cases := []struct {
		name, body string
		status     int
		param      string
		message    string // a part of the message
	}{
		{"not utf-8", "{\"model\":\"reranker\",\"query\":\"caf\xe9\",\"documents\":[\"a\"]}", 400, "", "UTF-8"},
		{"no model", `{"query":"q","documents":["a"]}`, 400, "model", ""},
		{"no query", `{"model":"reranker","documents":["a"]}`, 400, "query", ""},
		{"empty query", `{"model":"reranker","query":"","documents":["a"]}`, 400, "query", ""},
		{"query not a string", `{"model":"reranker","query":["q"],"documents":["a"]}`, 400, "query", ""},
		{"no documents", `{"model":"reranker","query":"q"}`, 400, "documents", ""},
		{"empty documents", `{"model":"reranker","query":"q","documents":[]}`, 400, "documents", ""},
		{"documents not an array", `{"model":"reranker","query":"q","documents":"a"}`, 400, "documents", ""},
		{"empty document", `{"model":"reranker","query":"q","documents":["a",""]}`, 400, "documents[1]", ""},
		{"number document", `{"model":"reranker","query":"q","documents":["a",3]}`, 400, "documents[1]", ""},
		{"object without text", `{"model":"reranker","query":"q","documents":[{"title":"a"}]}`, 400, "documents[0]", ""},
		{"too many documents", `{"model":"reranker","query":"q","documents":` + docs(maxDocs+1) + `}`, 400, "", "at most 8"},
		{"zero top_n", `{"model":"reranker","query":"q","documents":["a"],"top_n":0}`, 400, "top_n", ""},
		{"chat model", `{"model":"` + nodetest.Model + `","query":"q","documents":["a"]}`, 400, "", "chat model"},
		{"embedding model", `{"model":"minilm","query":"q","documents":["a"]}`, 400, "", "embedding model"},
		{"no truncation", `{"model":"reranker","query":"q","documents":["` + long + `"],"truncate":false}`, 400, "", "longer than"},
		{"unknown model", `{"model":"nope","query":"q","documents":["a"]}`, 404, "model", ""},
		{"cap exactly", `{"model":"reranker","query":"q","documents":` + docs(maxDocs) + `}`, 200, "", ""},
		{"object documents", `{"model":"reranker","query":"q","documents":[{"text":"a"},"b"],"top_n":9}`, 200, "", ""},
	}
	for _, n := range []struct {
		name string
		node *node.Node
	}{{"local", a}, {"forwarded", c}} {
		for _, tc := range cases {
			t.Run(n.name+"/"+tc.name, func(t *testing.T) {
				req, _ := http.NewRequest(http.MethodPost, n.node.URL()+"/v1/rerank", bytes.NewReader([]byte(tc.body)))
				req.Header.Set("Authorization", "Bearer "+testKey)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var out rerankAnswer
				if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != tc.status {
					t.Fatalf("status %d, want %d (%+v)", resp.StatusCode, tc.status, out.Error)
				}
				if tc.status == 200 {
					if len(out.Results) == 0 || out.Error != nil {
						t.Fatalf("answer %+v", out)
					}
					return
				}
				if out.Error == nil || out.Error.Type != "invalid_request_error" {
					t.Fatalf("error %+v, want invalid_request_error", out.Error)
				}
				if got := out.Error.Param; (tc.param == "") != (got == nil) || (got != nil && *got != tc.param) {
					t.Fatalf("param %v, want %q (%s)", got, tc.param, out.Error.Message)
				}
				if !strings.Contains(out.Error.Message, tc.message) {
					t.Fatalf("message %q, want it to say %q", out.Error.Message, tc.message)
				}
			})
		}
	}
}
