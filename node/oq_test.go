package node_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"fusion/engine/demo"
	"fusion/jobs"
	"fusion/node"
	"fusion/node/nodetest"
)

// TestOQStart: POST /admin/api/oq/start quantizes the float demo model
// into the models directory as a job (steps as progress), whose result
// states the size, bits and perplexity against the source; the new model
// is listed and loads; bad requests answer 4xx in the OpenAI shape.
func TestOQStart(t *testing.T) {
	models, cache := nodetest.Models(t), t.TempDir()
	const cached = "demo-org/cached"
	addCachedSnapshot(t, cache, cached, "main", "0123456789abcdef0123456789abcdef01234567")
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, DataDir: t.TempDir(), HFCache: cache})
	const calibration = "The baker lit his ovens before the sun cleared the hills."
	code, out := adminDo(t, n, http.MethodPost, "/admin/api/oq/start", `{"model":"demo","bits":4,"group_size":64,"target_bits":5,"evaluate":true,"calibration_text":"`+calibration+`"}`)
	if code != http.StatusAccepted {
		t.Fatalf("start: %d %v", code, out)
	}
	j := waitJob(t, n, decodeJob(t, out).ID, final)
	if j.State != jobs.Done || j.Kind != "quantize" || j.Progress.Unit != "steps" || j.Progress.Total == 0 || j.Progress.Done != j.Progress.Total {
		t.Fatalf("job %+v", j)
	}
	var res struct {
		Model         string          `json:"model"`
		Bytes         int64           `json:"bytes"`
		AvgBits       float64         `json:"avg_bits"`
		BitsPerWeight float64         `json:"bits_per_weight"`
		Quantized     int             `json:"quantized"`
		Raised        int             `json:"raised"`
		Sensitivity   string          `json:"sensitivity"`
		Widths        map[string]int  `json:"widths"`
		Plan          json.RawMessage `json:"plan"`
		PlanFile      string          `json:"plan_file"`
		Most          []struct {
			Name string  `json:"name"`
			Bits int     `json:"bits"`
			Cost float64 `json:"cost"`
		} `json:"most_sensitive"`
		Least []struct {
			Cost float64 `json:"cost"`
		} `json:"least_sensitive"`
		Source struct {
			Perplexity float64 `json:"perplexity"`
		} `json:"source_score"`
		Delta *float64 `json:"perplexity_delta"`
	}
	if err := json.Unmarshal(j.Result, &res); err != nil {
		t.Fatal(err)
	}
	if res.Model != "demo-oq5" || res.Bytes == 0 || res.AvgBits <= 4 || res.BitsPerWeight > 5 || res.Raised == 0 || res.Source.Perplexity <= 1 || res.Delta == nil ||
		res.Sensitivity != "calibration" || len(res.Widths) != 2 || res.Widths["8/64"] != res.Raised {
		t.Errorf("result %s", j.Result)
	}
	// The per-tensor plan is in the model's directory, the result keeps
	// a summary: its size does not grow with the model's tensors.
	if res.Plan != nil || res.PlanFile != node.OQPlanFile || len(res.Most) != 3 || len(res.Least) != 3 || res.Most[0].Cost < res.Most[2].Cost ||
		res.Least[0].Cost > res.Least[2].Cost || res.Most[0].Cost < res.Least[0].Cost || res.Most[0].Name == "" {
		t.Errorf("plan summary in %s", j.Result)
	}
	var plan []struct {
		Name   string  `json:"name"`
		Bits   int     `json:"bits"`
		BaseKL float64 `json:"base_kl"`
	}
	b, err := os.ReadFile(filepath.Join(models, "demo-oq5", node.OQPlanFile))
	if err != nil || json.Unmarshal(b, &plan) != nil || len(plan) != res.Quantized || plan[0].BaseKL <= 0 ||
		!slices.ContainsFunc(plan, func(p struct {
			Name   string  `json:"name"`
			Bits   int     `json:"bits"`
			BaseKL float64 `json:"base_kl"`
		}) bool {
			return p.Name == res.Most[0].Name && p.Bits == res.Most[0].Bits
		}) {
		t.Errorf("%s: %d entries (%v), want the %d quantized tensors", node.OQPlanFile, len(plan), err, res.Quantized)
	}
	// The record keeps the calibration text's length and hash, not the
	// text.
	var params map[string]any
	sum := sha256.Sum256([]byte(calibration))
	if err := json.Unmarshal(j.Params, &params); err != nil || params["calibration_text"] != nil ||
		params["calibration_bytes"] != float64(len(calibration)) || params["calibration_sha256"] != hex.EncodeToString(sum[:8]) {
		t.Errorf("params %s", j.Params)
	}
	if _, err := os.Stat(filepath.Join(models, "demo-oq5", "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	if ids := modelIDs(t, n); ids["demo-oq5"] == nil {
		t.Errorf("the new model is not listed: %v", ids)
	}
	code, out = adminDo(t, n, http.MethodPost, "/admin/api/models/demo-oq5/load", "")
	if code != http.StatusOK {
		t.Errorf("load: %d %v", code, out)
	}
	oqFromHFCache(t, n, models, cached)

	for _, tc := range []struct {
		body  string
		code  int
		param string
	}{
		{`{"model":"nope"}`, 404, "model"},
		{`{"model":"demo","target_bits":5}`, 409, "name"},
		{`{"model":"demo-oq5","name":"again"}`, 400, "model"},
		{`{"model":"../demo"}`, 400, "model"},
		{`{"model":"demo-org/../demo"}`, 400, "model"},
		{`{"model":"demo-org/.cached"}`, 400, "model"},
		{`{"model":"demo-org/nope"}`, 404, "model"},
		{`{"model":"demo-org/cached","name":"demo-org/out"}`, 400, "name"},
		{`{"model":"demo","bits":7}`, 400, "bits"},
		{`{"model":"demo","group_size":48}`, 400, "group_size"},
		{`{"model":"demo","bits":4,"target_bits":12}`, 400, "target_bits"},
		{`{"model":"demo","name":".hidden"}`, 400, "name"},
		{`{"model":"demo","colour":1}`, 400, "colour"},
		{`{"model":"demo","format":"gguf","type":"Q4_K_S"}`, 400, "type"},
		{`{"model":"demo","format":"gguf"}`, 400, "type"},
		{`{"model":"demo","format":"onnx"}`, 400, "format"},
		{`{"model":"demo","format":"gguf","type":"Q8_0","target_bits":4.5}`, 400, "target_bits"},
		{`{"model":"demo","calibrate":true}`, 400, "calibrate"},
		{`{"model":"demo","calibration_text":"some text"}`, 400, "calibration_text"},
		{`{}`, 400, "model"},
	} {
		code, out := adminDo(t, n, http.MethodPost, "/admin/api/oq/start", tc.body)
		if code != tc.code || errParam(out) != tc.param {
			t.Errorf("%s: %d %v, want %d on %q", tc.body, code, out, tc.code, tc.param)
		}
	}
}

// oqFromHFCache runs in TestOQStart's node: a model of the
// Hugging Face cache (ORG/NAME, its files links into the cache's blobs)
// is an oQ source, the output a plain name; the new model's accuracy
// job finds it as its float original, and the source's own accuracy and
// profile are addressed by its ORG/NAME. A running quantization
// cancelled through the admin API ends cancelled, leaving nothing in the
// models directory.
func oqFromHFCache(t *testing.T, n *node.Node, models, cached string) {
	code, out := adminDo(t, n, http.MethodPost, "/admin/api/oq/start", `{"model":"`+cached+`","bits":8,"group_size":32}`)
	if code != http.StatusAccepted {
		t.Fatalf("start from the HF cache: %d %v", code, out)
	}
	j := waitJob(t, n, decodeJob(t, out).ID, final)
	var res struct {
		Model  string `json:"model"`
		Source struct {
			Model string `json:"model"`
		} `json:"source"`
	}
	if err := json.Unmarshal(j.Result, &res); j.State != jobs.Done || err != nil || res.Model != "cached-oq8" || res.Source.Model != cached {
		t.Fatalf("job %+v (%v)", j, err)
	}
	// The cache's links were followed: the tokenizer is a file of its own.
	if st, err := os.Lstat(filepath.Join(models, "cached-oq8", "tokenizer.json")); err != nil || !st.Mode().IsRegular() {
		t.Errorf("the new model's tokenizer: %v %v", st, err)
	}
	eventually(t, "cached-oq8 listed", func() string {
		if modelIDs(t, n)["cached-oq8"] == nil {
			return "not listed"
		}
		return ""
	})
	text := `"text":"One two three four five six seven eight nine ten."`
	for _, tc := range []struct{ model, compare string }{{"cached-oq8", cached}, {cached, ""}} {
		code, out := adminDo(t, n, http.MethodPost, "/admin/api/bench/accuracy", `{"model":"`+tc.model+`",`+text+`}`)
		if code != http.StatusAccepted {
			t.Fatalf("accuracy of %s: %d %v", tc.model, code, out)
		}
		j := waitJob(t, n, decodeJob(t, out).ID, final)
		var acc struct {
			Compare string `json:"compare"`
			Found   bool   `json:"compare_found"`
		}
		if err := json.Unmarshal(j.Result, &acc); j.State != jobs.Done || err != nil || acc.Compare != tc.compare || acc.Found != (tc.compare != "") {
			t.Errorf("accuracy of %s: %+v (%v), want compared with %q", tc.model, j, err, tc.compare)
		}
	}
	for _, path := range []string{cached, url.PathEscape(cached)} {
		if list := profilesOf(t, n, path); len(list) != 1 || list[0]["model"] != cached || list[0]["kind"] != "accuracy" {
			t.Errorf("profiles of %s: %v", path, list)
		}
	}

	code, out = adminDo(t, n, http.MethodPost, "/admin/api/oq/start", `{"model":"demo","target_bits":5,"calibrate":true,"name":"cancelled"}`)
	if code != http.StatusAccepted {
		t.Fatalf("start: %d %v", code, out)
	}
	id := decodeJob(t, out).ID
	waitJob(t, n, id, func(j jobs.Job) bool { return j.Progress.Done > 0 || final(j) })
	code, out = adminDo(t, n, http.MethodDelete, "/admin/api/jobs/"+id, "")
	if c := decodeJob(t, out); code != 200 || c.State != jobs.Cancelled || c.Progress.Done >= c.Progress.Total {
		t.Fatalf("cancel mid-run: %d %v", code, out)
	}
	ents, _ := os.ReadDir(models)
	if slices.ContainsFunc(ents, func(e os.DirEntry) bool {
		return strings.HasPrefix(e.Name(), ".") || strings.HasPrefix(e.Name(), "cancelled")
	}) {
		t.Errorf("a cancelled quantization left %v in the models directory", ents)
	}
}

// TestOQStartGGUF: format gguf writes <name>.gguf into the models
// directory, which is listed and loads; its result names the GGUF type and
// the perplexity delta.
func TestOQStartGGUF(t *testing.T) {
	models := nodetest.Models(t)
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, DataDir: t.TempDir()})
	code, out := adminDo(t, n, http.MethodPost, "/admin/api/oq/start", `{"model":"demo","format":"gguf","type":"q8_0","evaluate":true}`)
	if code != http.StatusAccepted {
		t.Fatalf("start: %d %v", code, out)
	}
	j := waitJob(t, n, decodeJob(t, out).ID, final)
	if j.State != jobs.Done || j.Progress.Total == 0 || j.Progress.Done != j.Progress.Total {
		t.Fatalf("job %+v", j)
	}
	var res struct {
		Model       string         `json:"model"`
		Format      string         `json:"format"`
		Type        string         `json:"type"`
		Bytes       int64          `json:"bytes"`
		TensorTypes map[string]int `json:"tensor_types"`
		Delta       *float64       `json:"perplexity_delta"`
	}
	if err := json.Unmarshal(j.Result, &res); err != nil {
		t.Fatal(err)
	}
	if res.Model != "demo-Q8_0" || res.Format != "gguf" || res.Type != "Q8_0" || res.Bytes == 0 || res.TensorTypes["Q8_0"] == 0 || res.Delta == nil {
		t.Errorf("result %s", j.Result)
	}
	if _, err := os.Stat(filepath.Join(models, "demo-Q8_0.gguf")); err != nil {
		t.Fatal(err)
	}
	if ids := modelIDs(t, n); ids["demo-Q8_0"] == nil {
		t.Errorf("the new model is not listed: %v", ids)
	}
	code, out = adminDo(t, n, http.MethodPost, "/admin/api/models/demo-Q8_0/load", "")
	if code != http.StatusOK {
		t.Errorf("load: %d %v", code, out)
	}
	code, out = adminDo(t, n, http.MethodPost, "/admin/api/oq/start", `{"model":"demo","format":"gguf","type":"Q8_0"}`)
	if code != http.StatusConflict || errParam(out) != "name" {
		t.Errorf("again: %d %v, want 409 on name", code, out)
	}
}

// addGGUF writes the demo model into dir as NAME.gguf of a GGUF layout
// (f16, q4_k_m...).
func addGGUF(t *testing.T, dir, name, layout string) {
	t.Helper()
	o := demo.DefaultOptions()
	o.Format, o.GGUFType = demo.FormatGGUF, layout
	if _, err := demo.Create(filepath.Join(dir, name+".gguf"), o); err != nil {
		t.Fatal(err)
	}
}

// TestOQStartFromGGUF: a float GGUF of the models directory (named by
// its model id, the file's name without .gguf) is an oQ source: an MLX
// output directory that is listed and loads, with the perplexity delta
// against the GGUF; a GGUF output too. A quantized GGUF is a 400 saying
// why, not a 404.
func TestOQStartFromGGUF(t *testing.T) {
	models := nodetest.Models(t)
	addGGUF(t, models, "demo-f16", "f16")
	addGGUF(t, models, "demo-q4", "q4_k_m")
	n := nodetest.Start(t, nodetest.Options{APIKey: "k", ModelsDir: models, DataDir: t.TempDir()})
	for _, tc := range []struct{ body, model, file string }{
		{`{"model":"demo-f16","bits":4,"evaluate":true}`, "demo-f16-oq4", "demo-f16-oq4/model.safetensors"},
		{`{"model":"demo-f16.gguf","format":"gguf","type":"Q6_K"}`, "demo-f16-Q6_K", "demo-f16-Q6_K.gguf"},
	} {
		code, out := adminDo(t, n, http.MethodPost, "/admin/api/oq/start", tc.body)
		if code != http.StatusAccepted {
			t.Fatalf("%s: start: %d %v", tc.body, code, out)
		}
		j := waitJob(t, n, decodeJob(t, out).ID, final)
		var res struct {
			Model string   `json:"model"`
			Bytes int64    `json:"bytes"`
			Delta *float64 `json:"perplexity_delta"`
		}
		if err := json.Unmarshal(j.Result, &res); j.State != jobs.Done || err != nil || res.Model != tc.model || res.Bytes == 0 {
			t.Fatalf("%s: job %+v (%v)", tc.body, j, err)
		}
		if strings.Contains(tc.body, "evaluate") && res.Delta == nil {
			t.Errorf("%s: no perplexity delta in %s", tc.body, j.Result)
		}
		if _, err := os.Stat(filepath.Join(models, tc.file)); err != nil {
			t.Fatal(err)
		}
		eventually(t, tc.model+" listed", func() string {
			if modelIDs(t, n)[tc.model] == nil {
				return "not listed"
			}
			return ""
		})
		if code, out := adminDo(t, n, http.MethodPost, "/admin/api/models/"+tc.model+"/load", ""); code != http.StatusOK {
			t.Errorf("load %s: %d %v", tc.model, code, out)
		}
	}
	code, out := adminDo(t, n, http.MethodPost, "/admin/api/oq/start", `{"model":"demo-q4"}`)
	if code != http.StatusBadRequest || errParam(out) != "model" || !strings.Contains(fmt.Sprint(out), "re-quantizing a quantized model loses accuracy") {
		t.Errorf("a quantized GGUF: %d %v, want a 400 on model saying why", code, out)
	}
	if ents, _ := os.ReadDir(models); slices.ContainsFunc(ents, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), ".") }) {
		t.Errorf("a staging entry is left in the models directory: %v", ents)
	}
}

// TestOQCluster: a quantization asked of a to run on c writes the model
// into c's models directory; every node sees the job, and the model
// listed on c. A GGUF source of c's, asked of b, is quantized on c too.
func TestOQCluster(t *testing.T) {
	a, b, c := startTrio(t, nil)
	addGGUF(t, c.ModelsDir(), "demo-f16", "f16")
	code, out := adminDo(t, a, http.MethodPost, "/admin/api/oq/start", `{"model":"demo","bits":8,"group_size":32,"node":"c"}`)
	if code != http.StatusAccepted {
		t.Fatalf("start: %d %v", code, out)
	}
	j := decodeJob(t, out)
	if j.Node != "c" {
		t.Fatalf("job on %q, want c", j.Node)
	}
	if got := waitJob(t, b, j.ID, final); got.State != jobs.Done {
		t.Fatalf("b sees %+v", got)
	}
	if _, err := os.Stat(filepath.Join(c.ModelsDir(), "demo-oq8", "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "demo-oq8 listed on c", func() string {
		if nodes := modelIDs(t, a)["demo-oq8"]; !slices.Equal(nodes, []string{"c"}) {
			return fmt.Sprint(nodes)
		}
		return ""
	})
	code, out = adminDo(t, b, http.MethodPost, "/admin/api/oq/start", `{"model":"demo-f16","bits":4,"node":"c"}`)
	if code != http.StatusAccepted {
		t.Fatalf("start from a GGUF: %d %v", code, out)
	}
	if got := waitJob(t, a, decodeJob(t, out).ID, final); got.State != jobs.Done || got.Node != "c" {
		t.Fatalf("a sees %+v", got)
	}
	if _, err := os.Stat(filepath.Join(c.ModelsDir(), "demo-f16-oq4", "model.safetensors")); err != nil {
		t.Fatal(err)
	}
}
