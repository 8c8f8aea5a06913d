// Package mstest serves ModelScope's HTTP API for tests, as the official
// modelscope client (PyPI modelscope 1.40 over modelscope-hub 0.5) calls
// it: a model's revisions (GET /api/v1/models/{repo}/revisions), its
// files with Size and Sha256 (GET /api/v1/models/{repo}/repo/files), a
// file's bytes with Range (GET /api/v1/models/{repo}/repo?Revision=
// &FilePath=), the repo's info (GET /api/v1/models/{repo}) and search
// (GET /openapi/v1/models). ModelScope cannot be reached from the test
// machines, so this stand-in is checked by the official client itself
// (MSDownload runs its snapshot_download against it).
//
// Models are served from directories given to AddModel. Every file
// download is counted (the resume bound), and can be throttled (to stop
// a download half way) or corrupted once; a private repo answers 401
// without its token, in ModelScope's JSON error envelope.
package mstest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"fusion/internal/faultserve"
	"fusion/internal/testenv"
)

// Branch is the one branch every served model has (ModelScope's default).
const Branch = "master"

type file struct {
	path   string // slash-separated, in the repo
	disk   string
	size   int64
	sha256 string
}

type model struct {
	files []file
	token string // private: the token it takes ("" public)
}

// Server is ModelScope for one test.
type Server struct {
	// URL is what clients use as MODELSCOPE_ENDPOINT.
	URL string

	// Faults counts, paces and corrupts the file downloads (keyed
	// "org/name/path") and records every request ("GET /path?query",
	// with " Range: ..." when one was asked).
	faultserve.Faults

	mu     sync.Mutex
	models map[string]*model // repo → model
}

// Start serves until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{models: map[string]*model{}}
	ts := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(ts.Close)
	s.URL = ts.URL
	return s
}

// AddModel serves the files of src as the model repo ("org/name").
func (s *Server) AddModel(t testing.TB, repo, src string) {
	t.Helper()
	var files []file
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		sum := sha256.Sum256(b)
		files = append(files, file{path: filepath.ToSlash(rel), disk: p, size: int64(len(b)), sha256: hex.EncodeToString(sum[:])})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models[repo] = &model{files: files}
}

// Private makes repo answer 401 unless a request carries token (as a
// Bearer token or ModelScope's m_session_id cookie).
func (s *Server) Private(repo, token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models[repo].token = token
}

// msError answers in ModelScope's legacy error envelope.
func msError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"Code": status, "Message": msg, "RequestId": "mstest", "Success": false})
}

func msData(w http.ResponseWriter, data any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"Code": 200, "Data": data, "Message": "success", "RequestId": "mstest", "Success": true})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	line := r.Method + " " + r.URL.RequestURI()
	if rg := r.Header.Get("Range"); rg != "" {
		line += " Range: " + rg
	}
	s.Record(line)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		msError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	if r.URL.Path == "/openapi/v1/models" {
		s.search(w, r)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/v1/models/")
	parts := strings.Split(rest, "/")
	if !ok || len(parts) < 2 {
		msError(w, http.StatusNotFound, "not found")
		return
	}
	repo := parts[0] + "/" + parts[1]
	s.mu.Lock()
	m := s.models[repo]
	s.mu.Unlock()
	if m == nil {
		msError(w, http.StatusNotFound, "model "+repo+" does not exist")
		return
	}
	if m.token != "" && !authorized(r, m.token) {
		msError(w, http.StatusUnauthorized, "model "+repo+" is private: sign in with an access token")
		return
	}
	switch sub := strings.Join(parts[2:], "/"); sub {
	case "":
		msData(w, map[string]any{"Path": parts[0], "Name": parts[1], "Visibility": 5})
	case "revisions":
		msData(w, map[string]any{"RevisionMap": map[string]any{
			"Branches": []map[string]any{{"Revision": Branch, "CreatedAt": 1700000000}}, "Tags": []any{}}})
	case "repo/files":
		if rev := r.URL.Query().Get("Revision"); rev != Branch {
			msError(w, http.StatusNotFound, "revision "+rev+" not found")
			return
		}
		root := strings.Trim(r.URL.Query().Get("Root"), "/")
		var out []map[string]any
		for _, f := range m.files {
			if root != "" && !strings.HasPrefix(f.path, root+"/") {
				continue
			}
			out = append(out, map[string]any{"Name": path.Base(f.path), "Path": f.path, "Type": "blob", "Size": f.size,
				"Sha256": f.sha256, "Revision": Branch, "IsLFS": strings.HasSuffix(f.path, ".safetensors") || strings.HasSuffix(f.path, ".gguf")})
		}
		msData(w, map[string]any{"Files": out})
	case "repo":
		s.download(w, r, repo, m)
	default:
		msError(w, http.StatusNotFound, "not found")
	}
}

func authorized(r *http.Request, token string) bool {
	if r.Header.Get("Authorization") == "Bearer "+token {
		return true
	}
	c, err := r.Cookie("m_session_id")
	return err == nil && c.Value == token
}

// download serves one file with Range, counting what it sends.
func (s *Server) download(w http.ResponseWriter, r *http.Request, repo string, m *model) {
	q := r.URL.Query()
	if rev := q.Get("Revision"); rev != Branch {
		msError(w, http.StatusNotFound, "revision "+rev+" not found")
		return
	}
	i := slices.IndexFunc(m.files, func(f file) bool { return f.path == q.Get("FilePath") })
	if i < 0 {
		msError(w, http.StatusNotFound, "file "+q.Get("FilePath")+" not found")
		return
	}
	f := m.files[i]
	b, err := os.ReadFile(f.disk)
	if err != nil {
		msError(w, http.StatusInternalServerError, err.Error())
		return
	}
	key := repo + "/" + f.path
	if s.TakeCorrupt(key) && len(b) > 0 {
		b = slices.Clone(b)
		b[len(b)/2] ^= 0xff
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(s.Writer(key, w), r, path.Base(f.path), time.Time{}, bytes.NewReader(b))
}

// search answers GET /openapi/v1/models with the served public models
// whose id contains search (and whose owner is owner).
func (s *Server) search(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	var out []map[string]any
	for repo, m := range s.models {
		owner, name, _ := strings.Cut(repo, "/")
		if m.token != "" || !strings.Contains(strings.ToLower(repo), strings.ToLower(q.Get("search"))) ||
			q.Get("owner") != "" && q.Get("owner") != owner {
			continue
		}
		out = append(out, map[string]any{"id": repo, "owner": owner, "name": name, "downloads": 7, "likes": 1,
			"tags": []string{"mlx"}, "tasks": []string{"text-generation"}, "last_modified": 1700000000})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b map[string]any) int { return strings.Compare(a["id"].(string), b["id"].(string)) })
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"success": true, "data": map[string]any{"models": out, "total_count": len(out),
		"page_number": 1, "page_size": len(out)}})
}

// MSDownload downloads repo with the official modelscope client's
// snapshot_download into dir (local_dir) from the server, so a test can
// compare the bytes with what fusion fetched; in the same run it tries
// each of refused without a token and returns what the client raised for
// it ("ExceptionClass: the first line of its message"; "downloaded" if
// it did not refuse).
func (s *Server) MSDownload(t testing.TB, repo, dir string, refused ...string) map[string]string {
	t.Helper()
	py := testenv.Python(t)
	script := `import sys, json, tempfile
from modelscope.hub.snapshot_download import snapshot_download
snapshot_download(repo_id=sys.argv[1], local_dir=sys.argv[2])
out = {}
for r in sys.argv[3:]:
    try:
        snapshot_download(repo_id=r, local_dir=tempfile.mkdtemp())
        out[r] = "downloaded"
    except Exception as e:
        out[r] = "%s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:300])
print("MSTEST " + json.dumps(out))
`
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{"-c", script, repo, dir}, refused...)...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "MODELSCOPE_ENDPOINT="+s.URL, "MODELSCOPE_CACHE="+filepath.Join(home, "cache"),
		"MODELSCOPE_HOME="+home, "HOME="+home, "MODELSCOPE_LOG_LEVEL=40", "TMPDIR="+home)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("modelscope snapshot_download: %v\n%s", err, out.String())
	}
	res := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if js, ok := strings.CutPrefix(line, "MSTEST "); ok {
			if err := json.Unmarshal([]byte(js), &res); err != nil {
				t.Fatalf("modelscope run: %v in %q", err, line)
			}
		}
	}
	return res
}
