// Package hub speaks the Hugging Face Hub's HTTP API as huggingface_hub
// does, and ModelScope's as its modelscope client does: model search, a
// revision's commit and files, and file downloads (the Hub's resolve URLs
// located by a HEAD whose redirects are followed on the Hub's origin, to
// its CDN or, for Xet-backed files, to the CAS bridge, which get no
// token; ModelScope's repo?FilePath= route; large files in ranged parts
// at once; Range resume; sha256 of LFS files and git blob ids of the
// others checked).
// Fetch downloads a repository of either, or the files of it that allow
// patterns select, into a models directory: resumable, checked, and
// renamed into place only when complete. The endpoint (HF_ENDPOINT,
// MODELSCOPE_ENDPOINT) and token (HF_TOKEN, MODELSCOPE_API_TOKEN) are the
// caller's; nothing here reads the environment.
package hub

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// DefaultEndpoint is the Hub's address.
const DefaultEndpoint = "https://huggingface.co"

// Sources: the protocol a Client speaks.
const (
	SourceHF         = "hf"         // the Hugging Face Hub
	SourceModelScope = "modelscope" // ModelScope (modelscope.cn)
)

// Client calls one Hub endpoint.
type Client struct {
	source   string
	endpoint string
	token    string
	http     *http.Client // follows redirects, the token kept to the endpoint's origin
	// noRedirect answers a redirect itself (locating a file's bytes).
	noRedirect *http.Client
}

// Options configure a Client; zero values take the defaults.
type Options struct {
	// Source is the protocol: SourceHF (default) or SourceModelScope.
	Source   string
	Endpoint string // default DefaultEndpoint, or DefaultModelScopeEndpoint
	Token    string // sent as Authorization: Bearer (gated and private repos)
	// HTTP is the client used (default: a client with no overall timeout,
	// since a download may take hours; requests end with their context).
	HTTP *http.Client
}

// New returns a client of the Hub at o.Endpoint.
func New(o Options) *Client {
	c := &Client{source: SourceHF, endpoint: strings.TrimRight(o.Endpoint, "/"), token: o.Token, http: o.HTTP}
	def := DefaultEndpoint
	if o.Source == SourceModelScope {
		c.source, def = SourceModelScope, DefaultModelScopeEndpoint
	}
	if c.endpoint == "" {
		c.endpoint = def
	}
	if c.http == nil {
		c.http = &http.Client{Transport: &http.Transport{
			Proxy: http.ProxyFromEnvironment, ResponseHeaderTimeout: time.Minute,
			MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second,
		}}
	}
	// Copies, so the caller's client keeps its own policy.
	follow, stop := *c.http, *c.http
	follow.CheckRedirect = c.checkRedirect
	stop.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.http, c.noRedirect = &follow, &stop
	return c
}

// maxRedirects bounds the redirects of one request.
const maxRedirects = 10

// checkRedirect keeps the token to the endpoint's origin: a redirect to
// another origin (the Hub's CDN, Xet's CAS bridge: signed URLs) goes
// without Authorization and cookies. Go's own rule compares host names
// only (a port or a sub-domain of the endpoint would still get them).
func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("hub: more than %d redirects", maxRedirects)
	}
	if !c.sameOrigin(req.URL) {
		req.Header.Del("Authorization")
		req.Header.Del("Cookie")
	}
	return nil
}

// sameOrigin reports whether u has the endpoint's scheme, host and port:
// the only origin the token is sent to.
func (c *Client) sameOrigin(u *url.URL) bool {
	e, err := url.Parse(c.endpoint)
	return err == nil && origin(e) == origin(u)
}

// origin is scheme://host:port with the scheme's default port made
// explicit.
func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Hostname()) + ":" + port
}

// Endpoint is the Hub's base URL.
func (c *Client) Endpoint() string { return c.endpoint }

// Source is the protocol the client speaks (SourceHF or SourceModelScope).
func (c *Client) Source() string { return c.source }

// modelScope reports whether c speaks ModelScope's API.
func (c *Client) modelScope() bool { return c.source == SourceModelScope }

// Error is a Hub answer that is not a success, with the Hub's error code
// (X-Error-Code: RepoNotFound, GatedRepo, EntryNotFound,
// RevisionNotFound, ...) and a message that says what to do.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Sentinels matched by errors.Is on an *Error.
var (
	ErrUnauthorized = errors.New("hub: unauthorized") // 401: gated or private without a token, or no such repo
	ErrForbidden    = errors.New("hub: forbidden")    // 403: the token has no access
	ErrNotFound     = errors.New("hub: not found")    // 404
)

// Is matches the sentinels by status.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized
	case ErrForbidden:
		return e.Status == http.StatusForbidden
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	}
	return false
}

// maxErrorBody bounds the error text read from a failed answer.
const maxErrorBody = 4 << 10

// errorOf turns a failed answer about what (a repo, or a file of one)
// into an *Error whose message names the cause and the way out.
func (c *Client) errorOf(resp *http.Response, what string) *Error {
	code := resp.Header.Get("X-Error-Code")
	msg := resp.Header.Get("X-Error-Message")
	if msg == "" {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		var body struct {
			Error   string `json:"error"`
			Message string `json:"Message"` // ModelScope's
		}
		if json.Unmarshal(b, &body) == nil && (body.Error != "" || body.Message != "") {
			msg = cmp.Or(body.Error, body.Message)
		} else {
			msg = strings.TrimSpace(string(b))
		}
	}
	e := &Error{Status: resp.StatusCode, Code: code}
	tokenHint, site := "no token was sent: set one with --hf-token or HF_TOKEN", "the Hub"
	if c.modelScope() {
		tokenHint, site = "no token was sent: set one with --modelscope-token or MODELSCOPE_API_TOKEN", "ModelScope"
	}
	if c.token != "" {
		tokenHint = "the token sent was not accepted for it"
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized && code == "GatedRepo":
		e.Message = fmt.Sprintf("401 Unauthorized: %s is gated: accept its terms on the Hub and use a token of that account (%s)", what, tokenHint)
	case resp.StatusCode == http.StatusUnauthorized:
		e.Message = fmt.Sprintf("401 Unauthorized: %s was not found, or it is private or gated (%s)", what, tokenHint)
		if c.modelScope() {
			e.Message = fmt.Sprintf("401 Unauthorized: %s is private or needs a signed-in account (%s)", what, tokenHint)
		}
	case resp.StatusCode == http.StatusForbidden:
		e.Message = fmt.Sprintf("403 Forbidden: the token has no access to %s (a gated repo's terms not accepted, or a fine-grained token without it)", what)
	case resp.StatusCode == http.StatusNotFound:
		e.Message = fmt.Sprintf("404 Not Found: %s", what)
	default:
		e.Message = fmt.Sprintf("%s: %s", resp.Status, what)
	}
	if msg != "" {
		e.Message += " (" + site + " said: " + msg + ")"
	}
	return e
}

// get sends a GET with the token and returns a 2xx answer (the caller
// closes its body) or an *Error about what.
func (c *Client) get(ctx context.Context, u string, header http.Header, what string) (*http.Response, error) {
	return c.do(ctx, c.http, http.MethodGet, u, header, what)
}

// do sends a request with the token when u is on the endpoint's origin
// (checkRedirect keeps it there on redirects) and returns a 2xx answer
// (or, from the noRedirect client, a 3xx) or an *Error about what.
func (c *Client) do(ctx context.Context, hc *http.Client, method, u string, header http.Header, what string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if c.token != "" && c.sameOrigin(req.URL) {
		req.Header.Set("Authorization", "Bearer "+c.token)
		if c.modelScope() {
			// ModelScope's older routes read the session cookie, as its
			// client sends both.
			req.AddCookie(&http.Cookie{Name: "m_session_id", Value: c.token})
		}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("hub: %s: %w", what, err)
	}
	ok := resp.StatusCode >= 200 && resp.StatusCode <= 299 ||
		hc == c.noRedirect && resp.StatusCode >= 300 && resp.StatusCode <= 399
	if !ok {
		defer resp.Body.Close()
		return nil, c.errorOf(resp, what)
	}
	return resp, nil
}

// maxAPIBody bounds one API answer (a search page, a file list page).
const maxAPIBody = 32 << 20

func (c *Client) getJSON(ctx context.Context, u, what string, v any) (http.Header, error) {
	resp, err := c.get(ctx, u, nil, what)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAPIBody+1))
	if err != nil {
		return nil, fmt.Errorf("hub: %s: %w", what, err)
	}
	if len(b) > maxAPIBody {
		return nil, fmt.Errorf("hub: %s: answer over %d bytes", what, maxAPIBody)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return nil, fmt.Errorf("hub: %s: %w", what, err)
	}
	return resp.Header, nil
}

// repoPart is the syntax of a repo id's parts ("org/name" or "name").
var repoPart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// CheckRepo reports whether repo is a well-formed model repo id.
func CheckRepo(repo string) error {
	parts := strings.Split(repo, "/")
	if len(parts) > 2 || repo == "" {
		return fmt.Errorf("hub: repo %q: want org/name", repo)
	}
	for _, p := range parts {
		if !repoPart.MatchString(p) || strings.Contains(p, "..") || len(p) > 96 {
			return fmt.Errorf("hub: repo %q: %q is not a valid name", repo, p)
		}
	}
	return nil
}

// escapePath escapes each segment of a slash-separated path.
func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// SearchOptions select models (the Hub's /api/models parameters).
type SearchOptions struct {
	Search  string // substring of the id
	Author  string
	Library string // mlx, gguf, transformers, ...
	Sort    string // downloads, likes, lastModified, trendingScore
	Limit   int    // default 20, at most 100
}

// Model is one search hit.
type Model struct {
	ID           string   `json:"id"`
	Author       string   `json:"author,omitempty"`
	Downloads    int64    `json:"downloads"`
	Likes        int64    `json:"likes"`
	Tags         []string `json:"tags,omitempty"`
	PipelineTag  string   `json:"pipeline_tag,omitempty"`
	LibraryName  string   `json:"library_name,omitempty"`
	LastModified string   `json:"lastModified,omitempty"`
	Gated        any      `json:"gated,omitempty"` // false, "auto" or "manual"
	Private      bool     `json:"private,omitempty"`
}

// MaxSearchLimit bounds one search's hits.
const MaxSearchLimit = 100

// Search lists models, GET /api/models.
func (c *Client) Search(ctx context.Context, o SearchOptions) ([]Model, error) {
	if c.modelScope() {
		return c.msSearch(ctx, o)
	}
	q := url.Values{}
	if o.Search != "" {
		q.Set("search", o.Search)
	}
	if o.Author != "" {
		q.Set("author", o.Author)
	}
	if o.Library != "" {
		q.Set("library", o.Library)
	}
	if o.Sort != "" {
		q.Set("sort", o.Sort)
		q.Set("direction", "-1")
	}
	limit := o.Limit
	if limit <= 0 {
		limit = 20
	}
	q.Set("limit", strconv.Itoa(min(limit, MaxSearchLimit)))
	var out []Model
	if _, err := c.getJSON(ctx, c.endpoint+"/api/models?"+q.Encode(), "model search", &out); err != nil {
		return nil, err
	}
	if out == nil {
		out = []Model{}
	}
	return out, nil
}

// Info is a model repo at a revision.
type Info struct {
	ID       string `json:"id"`
	SHA      string `json:"sha"` // the revision's commit
	Private  bool   `json:"private"`
	Gated    any    `json:"gated"`
	Siblings []struct {
		RFilename string `json:"rfilename"`
	} `json:"siblings"`
}

// Info reads a repo at a revision (a branch, tag or commit; "" is main):
// GET /api/models/{repo}/revision/{rev}.
func (c *Client) Info(ctx context.Context, repo, revision string) (Info, error) {
	if err := CheckRepo(repo); err != nil {
		return Info{}, err
	}
	if c.modelScope() {
		return c.msInfo(ctx, repo, revision)
	}
	if revision == "" {
		revision = "main"
	}
	var out Info
	_, err := c.getJSON(ctx, c.endpoint+"/api/models/"+repo+"/revision/"+url.PathEscape(revision), "model "+repo+"@"+revision, &out)
	if err != nil {
		return Info{}, err
	}
	if out.SHA == "" {
		return Info{}, fmt.Errorf("hub: model %s@%s: the answer names no commit", repo, revision)
	}
	return out, nil
}

// File is one file of a repo at a commit. OID is its git blob id; LFS
// files also have the sha256 of their content.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	OID    string `json:"oid"`
	SHA256 string `json:"sha256,omitempty"`
}

// maxTreePages bounds the pages of one file listing (1000 files a page
// on the Hub).
const maxTreePages = 100

// Files lists every file of repo at commit, following the Hub's
// pagination: GET /api/models/{repo}/tree/{commit}?recursive=true.
func (c *Client) Files(ctx context.Context, repo, commit string) ([]File, error) {
	if err := CheckRepo(repo); err != nil {
		return nil, err
	}
	if c.modelScope() {
		return c.msFiles(ctx, repo, commit)
	}
	u := c.endpoint + "/api/models/" + repo + "/tree/" + url.PathEscape(commit) + "?recursive=true&expand=false"
	var out []File
	for page := 0; u != ""; page++ {
		if page == maxTreePages {
			return nil, fmt.Errorf("hub: files of %s: more than %d pages", repo, maxTreePages)
		}
		var entries []struct {
			Type string `json:"type"`
			Path string `json:"path"`
			Size int64  `json:"size"`
			OID  string `json:"oid"`
			LFS  *struct {
				OID  string `json:"oid"`
				Size int64  `json:"size"`
			} `json:"lfs"`
		}
		h, err := c.getJSON(ctx, u, "files of "+repo+"@"+commit, &entries)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.Type != "file" {
				continue
			}
			f := File{Path: e.Path, Size: e.Size, OID: e.OID}
			if e.LFS != nil {
				f.SHA256, f.Size = e.LFS.OID, e.LFS.Size
			}
			out = append(out, f)
		}
		u = nextLink(h.Get("Link"))
	}
	return out, nil
}

// nextLink is the rel="next" URL of a Link header ("" none).
func nextLink(h string) string {
	for _, part := range strings.Split(h, ",") {
		seg := strings.Split(part, ";")
		if len(seg) < 2 {
			continue
		}
		for _, p := range seg[1:] {
			if strings.ReplaceAll(strings.TrimSpace(p), " ", "") == `rel="next"` {
				return strings.Trim(strings.TrimSpace(seg[0]), "<>")
			}
		}
	}
	return ""
}

// ResolveURL is the download URL of a file of repo at commit.
func (c *Client) ResolveURL(repo, commit, path string) string {
	if c.modelScope() {
		return c.msFileURL(repo, commit, path)
	}
	return c.endpoint + "/" + repo + "/resolve/" + url.PathEscape(commit) + "/" + escapePath(path)
}
