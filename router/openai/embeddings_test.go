package openai_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"fusion/engine/embed/embedtest"
	"fusion/internal/testenv"
	"fusion/node/nodetest"
)

// Embedding model names of the embeddings tests.
const (
	embedModel = "minilm"
	mrlModel   = "minilm-mrl" // the same weights with a Matryoshka model card
	xlmrModel  = "xlmr"       // an XLM-RoBERTa (SentencePiece unigram tokenizer) in multilingual-e5's layout
	maxInputs  = 16
)

// embeddingModels writes the demo chat model and links all-MiniLM-L6-v2
// into a models dir, plus a copy that declares Matryoshka training.
func embeddingModels(t *testing.T) (models, fixture string) {
	t.Helper()
	fixture = testenv.EmbeddingModelDir(t, "all-minilm-l6-v2")
	models = nodetest.Models(t)
	if err := os.Symlink(fixture, filepath.Join(models, embedModel)); err != nil {
		t.Fatal(err)
	}
	mrl := filepath.Join(models, mrlModel)
	if err := os.MkdirAll(filepath.Join(mrl, "1_Pooling"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"config.json", "model.safetensors", "modules.json", "sentence_bert_config.json",
		"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "1_Pooling/config.json"} {
		if err := os.Symlink(filepath.Join(fixture, name), filepath.Join(mrl, name)); err != nil {
			t.Fatal(err)
		}
	}
	card := "---\nlibrary_name: sentence-transformers\ntags:\n- sentence-transformers\n- matryoshka\n---\n# test card\n"
	if err := os.WriteFile(filepath.Join(mrl, "README.md"), []byte(card), 0o644); err != nil {
		t.Fatal(err)
	}
	return models, fixture
}

// TestPythonSDKEmbeddings runs the openai Python client's
// embeddings.create against a node serving all-MiniLM-L6-v2 and the
// XLM-RoBERTa fixture, and through another node of its 3-node cluster that
// has no models and forwards over gRPC, and compares with
// sentence-transformers.
func TestPythonSDKEmbeddings(t *testing.T) {
	py := testenv.Python(t)
	if out, err := exec.Command(py, "-c", "import openai, pytest, sentence_transformers").CombinedOutput(); err != nil {
		missing(t, "openai, pytest or sentence-transformers is not installed in %s: %s", py, out)
	}
	models, fixture := embeddingModels(t)
	xlmr := embedtest.XLMRoberta(t)
	if err := os.Symlink(xlmr, filepath.Join(models, xlmrModel)); err != nil {
		t.Fatal(err)
	}
	nodes := nodetest.StartCluster(t,
		nodetest.Options{APIKey: testKey, ModelsDir: models, MaxEmbeds: maxInputs},
		nodetest.Options{APIKey: testKey, ModelsDir: t.TempDir(), MaxEmbeds: maxInputs},
		nodetest.Options{APIKey: testKey, ModelsDir: t.TempDir(), MaxEmbeds: maxInputs})
	n, fwd := nodes[0], nodes[2]
	// The forwarding node routes to a node that has the model loaded:
	// load the three models on a, then wait until b answers for each.
	for _, m := range []string{embedModel, mrlModel, xlmrModel, nodetest.Model} {
		path, body := "/v1/embeddings", any(map[string]any{"model": m, "input": "warm up"})
		if m == nodetest.Model {
			path, body = "/v1/chat/completions", map[string]any{"model": m, "messages": []map[string]string{{"role": "user", "content": "hi"}}, "max_tokens": 1}
		}
		var out any
		if code := post(t, n, path, body, &out); code != http.StatusOK {
			t.Fatalf("warming %s on a: %d", m, code)
		}
		deadline := time.Now().Add(30 * time.Second)
		for post(t, fwd, path, body, &out) != http.StatusOK {
			if time.Now().After(deadline) {
				t.Fatalf("c never forwarded %s to a", m)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	env := append(os.Environ(), "FUSION_BASE_URL="+n.URL(), "FUSION_FORWARD_URL="+fwd.URL(), "FUSION_API_KEY="+testKey,
		"FUSION_EMBED_MODEL="+embedModel, "FUSION_MRL_MODEL="+mrlModel, "FUSION_CHAT_MODEL="+nodetest.Model,
		"FUSION_EMBED_DIR="+fixture, "FUSION_MAX_INPUTS="+strconv.Itoa(maxInputs),
		"FUSION_XLMR_MODEL="+xlmrModel, "FUSION_XLMR_DIR="+xlmr,
		"HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "TOKENIZERS_PARALLELISM=false")
	out := runSuite(t, env, py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "testdata/test_openai_embeddings.py")
	t.Log(out)
	if m := regexp.MustCompile(`(\d+) passed`).FindStringSubmatch(out); m == nil || regexp.MustCompile(`failed|error`).MatchString(out) {
		t.Errorf("unexpected pytest summary:\n%s", out)
	}
}

// TestEmbeddingsRawHTTP covers what the SDK cannot send: a body that is
// not UTF-8, input of the wrong JSON type, a missing model.
func TestEmbeddingsRawHTTP(t *testing.T) {
	models, _ := embeddingModels(t)
	n := nodetest.Start(t, nodetest.Options{ModelsDir: models})
	cases := []struct {
		name, body string
		status     int
		param      string
	}{
		{"not utf-8", "{\"model\":\"minilm\",\"input\":\"caf\xe9\"}", 400, ""},
		{"input object", `{"model":"minilm","input":{"a":1}}`, 400, "input"},
		{"input numbers mixed", `{"model":"minilm","input":["a",[1,"b"]]}`, 400, "input[1]"},
		{"negative ids", `{"model":"minilm","input":[-1,2]}`, 400, "input[0]"},
		{"no model", `{"input":"a"}`, 400, "model"},
		{"no input", `{"model":"minilm"}`, 400, "input"},
		{"zero dimensions", `{"model":"minilm","input":"a","dimensions":0}`, 400, "dimensions"},
		{"ok", `{"model":"minilm","input":"a"}`, 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := http.Post(n.URL()+"/v1/embeddings", "application/json", bytes.NewReader([]byte(c.body)))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body struct {
				Error *struct {
					Type  string  `json:"type"`
					Param *string `json:"param"`
				} `json:"error"`
				Data []struct {
					Embedding []float32 `json:"embedding"`
				} `json:"data"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.status)
			}
			if c.status == 200 {
				if len(body.Data) != 1 || len(body.Data[0].Embedding) != 384 {
					t.Fatalf("answer %+v, want one vector of 384", body.Data)
				}
				return
			}
			if body.Error == nil || body.Error.Type != "invalid_request_error" {
				t.Fatalf("error %+v, want invalid_request_error", body.Error)
			}
			if got := body.Error.Param; (c.param == "") != (got == nil) || (got != nil && *got != c.param) {
				t.Fatalf("param %v, want %q", got, c.param)
			}
		})
	}
}
