// Package hubtest runs a real Hugging Face Hub-protocol server for tests:
// olah (PyPI olah, a self-hosted Hub mirror) serving local git
// repositories with their LFS objects offline, which answers the API
// routes, and a second olah in its caching mode in front of it for the
// file downloads (the offline mirror ignores Range, and its plain
// /api/models/{repo} route does not know mirrored repos, which the
// caching olah checks before its API answers; the caching olah answers
// Range as the Hub does), behind a small gate written here that routes
// between the two,
// counts the bytes of every file download, can throttle them, corrupt one
// answer, and answers a gated repository without its token the Hub's 401
// GatedRepo (olah has no gated repos). Every other answer is olah's,
// except for the LFS files of a repository marked Xet-backed (Server.Xet):
// their resolve URL answers as the Hub does for Xet storage, a 302 to a
// signed URL of a CAS bridge on another origin (BridgeURL, a server
// written here that serves the bytes with Range) with X-Xet-Hash,
// X-Linked-Size, X-Linked-Etag, X-Repo-Commit and the xet-auth Link.
package hubtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
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

// Server is the Hub for one test.
type Server struct {
	// URL is the gate's address: what clients use as HF_ENDPOINT.
	URL string
	// OlahURL is the caching olah's address (file downloads) and
	// MirrorURL the offline mirror's (the API), both behind the gate.
	OlahURL, MirrorURL string

	t      testing.TB
	mirror string // mirrors-path of the offline olah
	srv    *http.Server

	// Faults counts, paces and corrupts the file downloads (keyed
	// "org/name/path") and records every request ("GET /path").
	faultserve.Faults

	// BridgeURL is the CAS bridge's address (Xet-backed files' bytes).
	BridgeURL string

	mu         sync.Mutex
	gated      map[string]string // repo → the token it takes
	xet        map[string]bool   // repos whose LFS files are Xet-backed
	commits    map[string]string // repo → its commit (AddModel)
	sums       map[string]string // file key → sha256 of its content
	bridgeAuth []string          // Authorization/Cookie headers the bridge was sent
}

// olahCLI is the olah-cli next to the test Python interpreter.
func olahCLI(t testing.TB) string {
	py := testenv.Python(t)
	cli := filepath.Join(filepath.Dir(py), "olah-cli")
	if _, err := os.Stat(cli); err != nil {
		if testenv.Required() {
			t.Fatalf("olah-cli not found next to %s (scripts/requirements-test.txt installs olah)", py)
		}
		t.Skipf("olah-cli not found next to %s (run `make test`, which installs it)", py)
	}
	for _, tool := range []string{"git", "git-lfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			if testenv.Required() {
				t.Fatalf("%s not found (scripts/test-deps.sh installs it)", tool)
			}
			t.Skipf("%s not found", tool)
		}
	}
	return cli
}

// Start runs the servers until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	cli := olahCLI(t)
	dir := t.TempDir()
	s := &Server{t: t, mirror: filepath.Join(dir, "mirror"), gated: map[string]string{},
		xet: map[string]bool{}, commits: map[string]string{}, sums: map[string]string{}}
	if err := os.MkdirAll(filepath.Join(s.mirror, "models"), 0o755); err != nil {
		t.Fatal(err)
	}
	back := freePort(t)
	front := freePort(t)
	runOlah(t, cli, dir, "back", fmt.Sprintf(`[basic]
host = "127.0.0.1"
port = %d
repos-path = %q
mirrors-path = [%q]
[accessibility]
offline = true
`, back, filepath.Join(dir, "repos-back"), s.mirror))
	runOlah(t, cli, dir, "front", fmt.Sprintf(`[basic]
host = "127.0.0.1"
port = %d
repos-path = %q
hf-scheme = "http"
hf-netloc = "127.0.0.1:%d"
hf-lfs-netloc = "127.0.0.1:%d"
metadata-cache-ttl = 0
[accessibility]
offline = false
`, front, filepath.Join(dir, "repos-front"), back, back))
	s.OlahURL = fmt.Sprintf("http://127.0.0.1:%d", front)
	s.MirrorURL = fmt.Sprintf("http://127.0.0.1:%d", back)
	files, _ := url.Parse(s.OlahURL)
	api, _ := url.Parse(s.MirrorURL)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			if strings.HasPrefix(r.In.URL.Path, "/api/") {
				r.SetURL(api)
			} else {
				r.SetURL(files)
			}
		},
		ModifyResponse: func(resp *http.Response) error {
			if p := s.filePath(resp.Request.URL.Path); p != "" && resp.Request.Method == http.MethodGet {
				resp.Body = s.Reader(p, resp.Body)
			}
			return nil
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.URL = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Record(r.Method + " " + r.URL.Path)
		if repo := s.repoOf(r.URL.Path); repo != "" && s.refused(repo, r.Header.Get("Authorization")) {
			// The Hub's answer for a gated repo without (the right) token.
			w.Header().Set("X-Error-Code", "GatedRepo")
			w.Header().Set("X-Error-Message", "Access to model "+repo+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":"Access to model %s is restricted. You must have access to it and be authenticated to access it. Please log in."}`, repo)
			return
		}
		if key := s.filePath(r.URL.Path); key != "" && s.xetBacked(key) {
			s.redirectToBridge(w, r, key)
			return
		}
		proxy.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	t.Cleanup(func() { _ = s.srv.Close() })
	bln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.BridgeURL = "http://" + bln.Addr().String()
	bridge := &http.Server{Handler: http.HandlerFunc(s.serveBridge), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = bridge.Serve(bln) }()
	t.Cleanup(func() { _ = bridge.Close() })
	waitUp(t, s.OlahURL+"/api/whoami-v2")
	waitUp(t, s.MirrorURL+"/api/whoami-v2")
	return s
}

// runOlah starts one olah with config text until the test ends.
func runOlah(t testing.TB, cli, dir, name, config string) {
	cfg := filepath.Join(dir, name+".toml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cli, "-c", cfg)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("olah %s log (tail):\n%s", name, tail(b, 3000))
		}
	})
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func waitUp(t testing.TB, u string) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("olah did not answer %s within 60s", u)
}

// AddModel commits the files of src (a model directory) as the model repo
// repo ("org/name"), weights (*.safetensors, *.gguf) through git-lfs, and
// returns the commit.
func (s *Server) AddModel(t testing.TB, repo, src string) string {
	t.Helper()
	dst := filepath.Join(s.mirror, "models", filepath.FromSlash(repo))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dst
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q", "-b", "main")
	git("lfs", "install", "--local")
	git("lfs", "track", "*.safetensors", "*.gguf")
	git("add", "-A")
	git("commit", "-q", "-m", "add "+repo)
	commit := git("rev-parse", "HEAD")
	s.mu.Lock()
	s.commits[repo] = commit
	s.mu.Unlock()
	return commit
}

// Xet makes the LFS files (*.safetensors, *.gguf) of repo Xet-backed:
// their resolve URL redirects to the CAS bridge.
func (s *Server) Xet(repo string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.xet[repo] = true
}

// BridgeAuth lists the Authorization and Cookie headers the CAS bridge
// was sent (none, when clients keep their token to the Hub).
func (s *Server) BridgeAuth() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bridgeAuth)
}

// xetBacked reports whether the file key ("org/name/path") is an LFS file
// of a Xet-backed repo.
func (s *Server) xetBacked(key string) bool {
	parts := strings.SplitN(key, "/", 3)
	s.mu.Lock()
	defer s.mu.Unlock()
	ext := filepath.Ext(key)
	return len(parts) == 3 && s.xet[parts[0]+"/"+parts[1]] && (ext == ".safetensors" || ext == ".gguf")
}

// sum is the sha256 and size of the file key's content.
func (s *Server) sum(key string) (string, int64, error) {
	f, err := os.Open(s.local(key))
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	s.mu.Lock()
	sum, ok := s.sums[key]
	s.mu.Unlock()
	if !ok {
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return "", 0, err
		}
		sum = hex.EncodeToString(h.Sum(nil))
		s.mu.Lock()
		s.sums[key] = sum
		s.mu.Unlock()
	}
	return sum, st.Size(), nil
}

// local is the mirror's working-tree copy of the file key.
func (s *Server) local(key string) string {
	return filepath.Join(s.mirror, "models", filepath.FromSlash(key))
}

// sign is the bridge URL's signature of the file key (the Hub signs its
// bridge URLs; an unsigned or altered one is refused).
func (s *Server) sign(key string) string {
	h := sha256.Sum256([]byte(s.mirror + "\x00" + key))
	return hex.EncodeToString(h[:])
}

// redirectToBridge answers a resolve of a Xet-backed file as the Hub
// does: 302 to the bridge with the file's Xet and LFS metadata.
func (s *Server) redirectToBridge(w http.ResponseWriter, r *http.Request, key string) {
	sum, size, err := s.sum(key)
	if err != nil {
		w.Header().Set("X-Error-Code", "EntryNotFound")
		http.Error(w, "Entry not found", http.StatusNotFound)
		return
	}
	parts := strings.SplitN(key, "/", 3)
	repo := parts[0] + "/" + parts[1]
	s.mu.Lock()
	commit := s.commits[repo]
	s.mu.Unlock()
	xh := sha256.Sum256([]byte("xet\x00" + sum)) // stands for the Xet merkle hash
	xetHash := hex.EncodeToString(xh[:])
	q := url.Values{"file": {key}, "X-Amz-Expires": {"3600"}, "X-Amz-Signature": {s.sign(key)}}
	h := w.Header()
	h.Set("X-Repo-Commit", commit)
	h.Set("X-Linked-Size", fmt.Sprint(size))
	h.Set("X-Linked-Etag", `"`+sum+`"`)
	h.Set("ETag", `"`+sum+`"`)
	h.Set("X-Xet-Hash", xetHash)
	h.Set("Link", fmt.Sprintf(`<%s/api/models/%s/xet-read-token/%s>; rel="xet-auth"`, s.URL, repo, commit))
	h.Set("Location", s.BridgeURL+"/xet-bridge-us/"+xetHash+"?"+q.Encode())
	w.WriteHeader(http.StatusFound)
}

// serveBridge is the CAS bridge: a signed URL's file, with Range, its
// bytes counted (and paced, corrupted) by Faults as the gate's are.
func (s *Server) serveBridge(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("file")
	s.Record("BRIDGE " + r.Method + " " + key + " " + r.Header.Get("Range"))
	s.mu.Lock()
	for _, h := range []string{"Authorization", "Cookie"} {
		if v := r.Header.Get(h); v != "" {
			s.bridgeAuth = append(s.bridgeAuth, h+": "+v)
		}
	}
	s.mu.Unlock()
	if key == "" || r.URL.Query().Get("X-Amz-Signature") != s.sign(key) || !s.xetBacked(key) {
		http.Error(w, "AccessDenied: signature does not match", http.StatusForbidden)
		return
	}
	f, err := os.Open(s.local(key))
	if err != nil {
		http.Error(w, "NoSuchKey", http.StatusNotFound)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out := s.Writer(key, w)
	if r.Method == http.MethodGet && s.TakeCorrupt(key) {
		out = &corrupter{ResponseWriter: out}
	}
	w.Header().Set("ETag", `"`+path.Base(r.URL.Path)+`"`) // the bridge's own (the Xet hash), not the sha256
	http.ServeContent(out, r, "", st.ModTime(), f)
}

// corrupter flips the first body byte written through it.
type corrupter struct {
	http.ResponseWriter
	done bool
}

func (c *corrupter) Write(b []byte) (int, error) {
	if !c.done && len(b) > 0 {
		c.done = true
		b = slices.Clone(b)
		b[0] ^= 0xff
	}
	return c.ResponseWriter.Write(b)
}

// Gate makes repo answer 401 GatedRepo unless a request carries token.
func (s *Server) Gate(repo, token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gated[repo] = token
}

// repoOf is the model repo a request path is about ("" none).
func (s *Server) repoOf(p string) string {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(parts) >= 4 && parts[0] == "api" && parts[1] == "models" {
		return parts[2] + "/" + parts[3]
	}
	if len(parts) >= 3 && parts[2] == "resolve" {
		return parts[0] + "/" + parts[1]
	}
	return ""
}

// filePath is "org/name/file" of a resolve path ("" for other paths).
func (s *Server) filePath(p string) string {
	parts := strings.SplitN(strings.TrimPrefix(p, "/"), "/", 5)
	if len(parts) == 5 && parts[2] == "resolve" {
		return parts[0] + "/" + parts[1] + "/" + parts[4]
	}
	return ""
}

func (s *Server) refused(repo, auth string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	tok, ok := s.gated[repo]
	return ok && auth != "Bearer "+tok
}

// HFDownload downloads repo with the official huggingface_hub client into
// dir (snapshot_download, local_dir) from the server, so a test can
// compare it with what fusion fetched.
func (s *Server) HFDownload(t testing.TB, repo, dir string, allow ...string) {
	t.Helper()
	s.snapshotDownload(t, "", "local_dir", dir, Download{Repo: repo, Allow: allow})
}

// HFDownloadToken is HFDownload with HF_TOKEN set to token.
func (s *Server) HFDownloadToken(t testing.TB, token, repo, dir string, allow ...string) {
	t.Helper()
	s.snapshotDownload(t, token, "local_dir", dir, Download{Repo: repo, Allow: allow})
}

// Download is one snapshot_download: a repo at a revision (a branch, tag
// or commit; "" the client's default, main) with allow patterns.
type Download struct {
	Repo     string   `json:"repo"`
	Revision string   `json:"revision,omitempty"`
	Allow    []string `json:"allow,omitempty"`
}

// HFCacheDownloads downloads with the official huggingface_hub client
// into the Hugging Face cache cacheDir (snapshot_download, cache_dir), one
// after the other in one process, so a test gets the cache layout as the
// client makes it.
func (s *Server) HFCacheDownloads(t testing.TB, cacheDir string, ds ...Download) {
	t.Helper()
	s.snapshotDownload(t, "", "cache_dir", cacheDir, ds...)
}

// Branch makes branch a branch of repo at a new commit on its commit
// (AddModel's) that removes the files remove, and returns that commit;
// main stays checked out.
func (s *Server) Branch(t testing.TB, repo, branch string, remove ...string) string {
	t.Helper()
	var commit string
	for _, args := range [][]string{{"checkout", "-q", "-b", branch}, append([]string{"rm", "-q"}, remove...),
		{"commit", "-q", "-m", "remove " + strings.Join(remove, " ")}, {"rev-parse", "HEAD"}, {"checkout", "-q", "main"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = filepath.Join(s.mirror, "models", filepath.FromSlash(repo))
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if args[0] == "rev-parse" {
			commit = strings.TrimSpace(string(out))
		}
	}
	return commit
}

// snapshotDownload runs snapshot_download(repo, revision=, allow_patterns=,
// <kw>=dir) for each of ds in one process, with HF_TOKEN=token when one
// is given.
func (s *Server) snapshotDownload(t testing.TB, token, kw, dir string, ds ...Download) {
	t.Helper()
	py := testenv.Python(t)
	script := `import sys, json
from huggingface_hub import snapshot_download
for d in json.loads(sys.argv[1]):
    snapshot_download(d["repo"], revision=d.get("revision") or None, allow_patterns=d.get("allow") or None, **{sys.argv[2]: sys.argv[3]})
`
	list, err := json.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", script, string(list), kw, dir)
	cmd.Env = append(os.Environ(), "HF_ENDPOINT="+s.URL, "HF_HUB_DISABLE_XET=1", "HF_HUB_OFFLINE=0", "HF_HUB_DISABLE_TELEMETRY=1",
		"HF_HOME="+t.TempDir(), "HF_HUB_DISABLE_PROGRESS_BARS=1")
	if token != "" {
		cmd.Env = append(cmd.Env, "HF_TOKEN="+token)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("huggingface_hub snapshot_download: %v\n%s", err, out.String())
	}
}
