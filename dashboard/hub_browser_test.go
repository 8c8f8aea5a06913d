package dashboard_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"fusion/engine/demo"
	"fusion/internal/hubtest"
	"fusion/internal/mstest"
	"fusion/node"
	"fusion/node/nodetest"
)

// searchFront answers the Hub's model search (GET /api/models?search=),
// which olah's offline mirror does not have, with the given repos whose id
// contains the search, in the Hub's documented shape, and passes every
// other request to the hubtest server.
func searchFront(t *testing.T, hubURL string, repos []map[string]any) string {
	t.Helper()
	u, err := url.Parse(hubURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/models" {
			proxy.ServeHTTP(w, r)
			return
		}
		out := []map[string]any{}
		for _, m := range repos {
			if strings.Contains(m["id"].(string), r.URL.Query().Get("search")) {
				out = append(out, m)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// signIn signs the tab in with the admin key.
func (b *tab) signIn() {
	b.t.Helper()
	b.open("/admin/", "Sign in")
	b.do("sign in", chromedp.SetValue(chromedp.CSS(`input[name="key"]`), key), chromedp.Click(chromedp.CSS(`form.signin button`)))
	b.waitText("dashboard", "main h1", "Dashboard")
}

// download fills the download form of a search result on the Hugging
// Face page and waits for the page to say the job started.
func (b *tab) download(repo, node, name, allow string) {
	b.t.Helper()
	form := fmt.Sprintf(`form[aria-label="Download %s"]`, repo)
	b.do("search "+repo, chromedp.SetValue(chromedp.CSS(`input[name="search"]`), repo), chromedp.Click(chromedp.CSS(`form[aria-label="Search models"] button`)))
	b.waitText("result "+repo, ".hub-answer", repo)
	b.do("open the form of "+repo, chromedp.Click(chromedp.CSS(`details.dl:has(`+form+`) summary`)))
	set := fmt.Sprintf(`(() => { const f = document.querySelector(%q); f.elements.allow_patterns.value = %q; f.elements.name.value = %q; f.elements.node.value = %q; return f.elements.node.value; })()`, form, allow, name, node)
	if got := eval[string](b, set); got != node {
		b.t.Fatalf("target node %q not offered (the select says %q)", node, got)
	}
	b.do("download "+repo, chromedp.Click(chromedp.CSS(form+` button[type="submit"]`)))
	b.waitText("job of "+repo+" started", form+` .dl-msg`, "started on "+node)
}

// jobOf is the id of the newest job whose card names repo (as name).
func (b *tab) jobOf(what string) string {
	b.t.Helper()
	js := fmt.Sprintf(`(() => { const c = [...document.querySelectorAll('.job')].find((e) => e.textContent.includes(%q)); return c ? c.dataset.jobId : ''; })()`, what)
	b.wait("job card of "+what, js+` !== ''`)
	return eval[string](b, js)
}

func jobSel(id string) string { return fmt.Sprintf(`.job[data-job-id=%q]`, id) }

// TestPanelHub drives the Hugging Face and Jobs pages in Chromium against
// a 3-node cluster whose Hub is a local Hub-protocol server (olah, see
// internal/hubtest): the search finds the demo repo; a download to c
// asked on a's panel shows its progress bar moving until done, and the
// model is then on c on the Models page; a throttled download is
// cancelled from the Jobs page and shows cancelled, then is deleted; a
// gated repo's job shows the token message; with the ModelScope source
// the search finds the repo of a ModelScope stand-in (internal/mstest)
// and its download runs on b.
func TestPanelHub(t *testing.T) {
	hub := hubtest.Start(t)
	const repo, gated = "demo-org/demo-model", "demo-org/gated-model"
	src := filepath.Join(t.TempDir(), "src")
	if _, err := demo.Create(src, demo.Options{Hidden: 256, Heads: 4, KVHeads: 2, Intermediate: 512, Layers: 4, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	hub.AddModel(t, repo, src)
	hub.AddModel(t, gated, src)
	hub.Gate(gated, "not-given-to-the-nodes")
	endpoint := searchFront(t, hub.URL, []map[string]any{
		{"id": repo, "downloads": 1234, "likes": 56, "pipeline_tag": "text-generation", "library_name": "transformers", "lastModified": "2026-11-30T12:00:00.000Z"},
		{"id": gated, "downloads": 7, "likes": 1, "gated": "manual", "library_name": "transformers"},
	})
	ms := mstest.Start(t)
	const msRepo = "ms-org/ms-model"
	ms.AddModel(t, msRepo, src)
	nodes := startMembers(t, func(string) nodetest.Options {
		return nodetest.Options{ModelsDir: nodetest.Models(t), DataDir: t.TempDir(),
			HF: node.HFConfig{Endpoint: endpoint, ModelScopeEndpoint: ms.URL, MinFreeDisk: 1}}
	})
	a := nodes[0]
	browser := startBrowser(t)
	pa := newTab(t, browser, a.URL())
	pa.signIn()

	// The search shows the repos with their figures and tags.
	pa.nav("Hub")
	pa.do("search demo", chromedp.SetValue(chromedp.CSS(`input[name="search"]`), "demo-org"), chromedp.Click(chromedp.CSS(`form[aria-label="Search models"] button`)))
	pa.waitText("search results", ".hub-answer", "2 models")
	for _, want := range []string{repo, "1234 downloads", "56 likes", "updated 2026-11-30", "text-generation", "transformers", gated, "gated"} {
		pa.waitText("result shows "+want, ".hub-answer", want)
	}
	if got := eval[string](pa, `[...document.querySelector('form[aria-label="Download `+repo+`"] select[name="node"]').options].map((o) => o.value).join(',')`); got != ",a,b,c,@placement" {
		t.Errorf("target nodes offered: %q, want this node, a, b, c and a placement's", got)
	}
	pa.checkAccessible("hub results")
	pa.shoot("hub-search")

	// A download to c from a's panel: slowed to about five seconds, so
	// the bar is seen part-way before the job is done.
	hub.Throttle(max(st.Size()/5, 1))
	pa.download(repo, "c", "", "*.json, *.safetensors")
	pa.nav("Jobs")
	id := pa.jobOf(repo)
	if _, err := evalIn[bool](pa, `(() => { window.barValues = []; const sel = '`+jobSel(id)+` progress';
	  setInterval(() => { const p = document.querySelector(sel); if (p && p.hasAttribute('value')) window.barValues.push(p.value); }, 100);
	  return true; })()`); err != nil {
		t.Fatal(err)
	}
	pa.waitText("download done", jobSel(id)+" .job-state", "done")
	hub.Throttle(0)
	if between := eval[int](pa, `window.barValues.filter((v) => v > 0 && v < 100).length`); between == 0 {
		t.Errorf("the progress bar was never seen part-way: %v", eval[[]float64](pa, `window.barValues`))
	}
	pa.waitText("done at 100 %", jobSel(id)+" .job-figures", "(100.0 %)")
	if node := eval[string](pa, `document.querySelector('`+jobSel(id)+` .job-node').textContent`); node != "c" {
		t.Errorf("the job runs on %q, want c", node)
	}
	pa.nav("Models")
	pa.wait("demo-model on c", `[...document.querySelectorAll('main tbody tr')].some((r) => r.cells[0].textContent === 'demo-model' && r.cells[8].textContent === 'c')`)

	// A throttled download, cancelled from the Jobs page, then deleted.
	hub.Throttle(32 << 10)
	pa.nav("Hub")
	pa.download(repo, "c", "slow", "*.json, *.safetensors")
	pa.nav("Jobs")
	slow := pa.jobOf("as slow")
	pa.wait("slow download under way", `(() => { const p = document.querySelector('`+jobSel(slow)+` progress'); return !!p && p.value > 0 && p.value < 100; })()`)
	pa.waitText("rate shown", jobSel(slow)+" .job-figures", "/s · ETA")
	pa.checkAccessible("jobs running")
	pa.shoot("jobs")
	pa.do("cancel", chromedp.Click(chromedp.CSS(`button[aria-label="Cancel job `+slow+`"]`)))
	pa.waitText("cancelled", jobSel(slow)+" .job-state", "cancelled")
	hub.Throttle(0)
	pa.wait("delete offered", `!document.querySelector('button[aria-label="Delete job `+slow+`"]').hidden && document.querySelector('button[aria-label="Cancel job `+slow+`"]').hidden`)
	pa.do("delete", chromedp.Click(chromedp.CSS(`button[aria-label="Delete job `+slow+`"]`)))
	pa.wait("card gone", `!document.querySelector('`+jobSel(slow)+`')`)
	if code, out := call(t, "GET", a.URL()+"/admin/api/jobs/"+slow, key, "", nil); code != http.StatusNotFound {
		t.Errorf("the deleted job: %d %s", code, out)
	}

	// A gated repo without a token: the job fails with the Hub's 401, in words.
	pa.nav("Hub")
	pa.download(gated, "b", "", "")
	pa.nav("Jobs")
	g := pa.jobOf(gated)
	pa.waitText("gated failed", jobSel(g)+" .job-state", "failed")
	pa.waitText("token message", jobSel(g)+" .job-error", "needs a token: set --hf-token")
	pa.waitText("the Hub's 401", jobSel(g)+" .job-error", "401")
	pa.checkAccessible("jobs finished")
	pa.shoot("jobs-finished")

	// To the nodes a placement takes: three replicas, so every node
	// downloads, under one job on a that then stores the placement.
	form := fmt.Sprintf(`form[aria-label="Download %s"]`, repo)
	pa.nav("Hub")
	pa.do("search "+repo, chromedp.SetValue(chromedp.CSS(`input[name="search"]`), repo), chromedp.Click(chromedp.CSS(`form[aria-label="Search models"] button`)))
	pa.waitText("result "+repo, ".hub-answer", repo)
	pa.do("open the form of "+repo, chromedp.Click(chromedp.CSS(`details.dl:has(`+form+`) summary`)))
	if got := eval[bool](pa, `document.querySelector('`+form+` .dl-placement').hidden`); !got {
		t.Error("the placement's fields show before a placement is chosen")
	}
	set := fmt.Sprintf(`(() => { const f = document.querySelector(%q); f.elements.allow_patterns.value = '*.json, *.safetensors'; f.elements.name.value = 'everywhere';
	  f.elements.node.value = '@placement'; f.elements.node.dispatchEvent(new Event('change')); f.elements.replicas.value = '3';
	  return !f.querySelector('.dl-placement').hidden; })()`, form)
	if !eval[bool](pa, set) {
		t.Fatal("the placement's fields are hidden after choosing a placement")
	}
	pa.checkAccessible("placement form")
	pa.do("download for a placement", chromedp.Click(chromedp.CSS(form+` button[type="submit"]`)))
	pa.waitText("placement job started", form+` .dl-msg`, "started on a (it downloads to every node of the placement")
	pa.nav("Jobs")
	placed := pa.jobOf("as everywhere to the nodes of 3 replicas")
	pa.waitText("placement done", jobSel(placed)+" .job-state", "done")
	for _, n := range nodes {
		if _, err := os.Stat(filepath.Join(n.ModelsDir(), "everywhere", "model.safetensors")); err != nil {
			t.Errorf("the placement's download is not on %s: %v", n.Cluster().ID(), err)
		}
	}
	if spec, ok := a.Cluster().PlacementSpecOf("everywhere"); !ok || spec.Replicas != 3 {
		t.Errorf("placement %+v %v", spec, ok)
	}

	// ModelScope (the stand-in of internal/mstest): the source select
	// searches it, and a download from it runs on b.
	pa.nav("Hub")
	pa.do("modelscope", chromedp.SetValue(chromedp.CSS(`select[name="source"]`), "modelscope"))
	pa.download(msRepo, "b", "from-ms", "*.json, *.safetensors")
	pa.nav("Jobs")
	fromMS := pa.jobOf("as from-ms")
	pa.waitText("modelscope download done", jobSel(fromMS)+" .job-state", "done")
	if _, err := os.Stat(filepath.Join(nodes[1].ModelsDir(), "from-ms", "model.safetensors")); err != nil {
		t.Errorf("the ModelScope download is not on b: %v", err)
	}
}
