package deploy_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"fusion/node/nodetest"
)

// family is one metric family of a scrape: its type and label names.
type family struct {
	typ    string
	labels []string
}

// scrape runs a chat request on a fresh node and returns its Prometheus
// families by name.
func scrape(t *testing.T) map[string]family {
	t.Helper()
	n := nodetest.Start(t, nodetest.Options{})
	resp, err := http.Post(n.URL()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.Get(n.URL() + "/metrics?format=prometheus")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := map[string]family{}
	sample := regexp.MustCompile(`^([a-z_:][a-z0-9_:]*)(?:\{(.*)\})? `)
	label := regexp.MustCompile(`([a-z_][a-z0-9_]*)="`)
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[1] == "TYPE" {
			out[f[2]] = family{typ: f[3]}
			continue
		}
		m := sample.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(line, "#") {
			continue
		}
		name := m[1]
		if _, ok := out[name]; !ok {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b := strings.TrimSuffix(name, suffix); b != name {
					if _, ok := out[b]; ok {
						name = b
					}
				}
			}
		}
		f := out[name]
		for _, l := range label.FindAllStringSubmatch(m[2], -1) {
			if l[1] != "le" && l[1] != "quantile" && !slices.Contains(f.labels, l[1]) {
				f.labels = append(f.labels, l[1])
			}
		}
		sort.Strings(f.labels)
		out[name] = f
	}
	if len(out) == 0 {
		t.Fatalf("empty scrape: %s", raw)
	}
	return out
}

// TestMetricsTable: metrics.md lists exactly the fusion_* families a node
// exports, each with its type and label names.
func TestMetricsTable(t *testing.T) {
	doc, err := os.ReadFile("metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(fusion_[a-z0-9_]+)` \\| ([a-z]+) \\| ?([a-z, ]*?) ?\\|")
	table := map[string]family{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		var labels []string
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
		sort.Strings(labels)
		table[m[1]] = family{typ: m[2], labels: labels}
	}
	got := scrape(t)
	for name, f := range got {
		if !strings.HasPrefix(name, "fusion_") {
			continue
		}
		want, ok := table[name]
		switch {
		case !ok:
			t.Errorf("%s (%s %v) is exported but not in metrics.md", name, f.typ, f.labels)
		case want.typ != f.typ || (len(f.labels) > 0 && !slices.Equal(want.labels, f.labels)):
			// A family with no sample yet shows no labels: only its
			// type is checked then.
			t.Errorf("%s: metrics.md says %s %v, the node exports %s %v", name, want.typ, want.labels, f.typ, f.labels)
		}
	}
	for name := range table {
		if _, ok := got[name]; !ok {
			t.Errorf("metrics.md lists %s, which the node does not export", name)
		}
	}
}

// TestGrafanaDashboard: the dashboard is valid JSON in Grafana's model
// (unique panel ids, grid positions inside the 24-column grid, a
// datasource variable), and every metric its queries name is one a node
// exports.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("grafana/fusion.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID           string `json:"uid"`
		SchemaVersion int    `json:"schemaVersion"`
		Templating    struct {
			List []struct{ Name, Type, Query string } `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID      int                      `json:"id"`
			Title   string                   `json:"title"`
			GridPos struct{ X, Y, W, H int } `json:"gridPos"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.SchemaVersion < 30 || len(d.Panels) < 10 {
		t.Fatalf("uid %q schemaVersion %d panels %d", d.UID, d.SchemaVersion, len(d.Panels))
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	if !vars["datasource"] || !vars["instance"] {
		t.Errorf("variables %v: want datasource and instance", vars)
	}
	got := scrape(t)
	name := regexp.MustCompile(`\b((?:fusion|go|process)_[a-z0-9_]+)`)
	ids, titles := map[int]bool{}, map[string]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] || titles[p.Title] {
			t.Errorf("panel %d %q: id or title used twice", p.ID, p.Title)
		}
		ids[p.ID], titles[p.Title] = true, true
		if g := p.GridPos; g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: grid position %+v outside the 24-column grid", p.Title, g)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if strings.Count(q.Expr, "(") != strings.Count(q.Expr, ")") || strings.Count(q.Expr, "{") != strings.Count(q.Expr, "}") {
				t.Errorf("panel %q %s: unbalanced %s", p.Title, q.RefID, q.Expr)
			}
			if !strings.Contains(q.Expr, `instance=~"$instance"`) {
				t.Errorf("panel %q %s: not filtered by the node variable: %s", p.Title, q.RefID, q.Expr)
			}
			for _, m := range name.FindAllString(q.Expr, -1) {
				base := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b := strings.TrimSuffix(m, suffix); b != m && got[b].typ == "histogram" {
						base = b
					}
				}
				if _, ok := got[base]; !ok {
					t.Errorf("panel %q %s: %s is not exported", p.Title, q.RefID, m)
				}
			}
		}
	}
}
