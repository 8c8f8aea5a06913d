package hub

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ModelScope's HTTP API, as its official client (PyPI modelscope 1.40,
// modelscope-hub 0.5) speaks it: the legacy /api/v1 routes for a repo's
// revisions, files and file downloads, the /openapi/v1 route for search.

// DefaultModelScopeEndpoint is ModelScope's address (MODELSCOPE_ENDPOINT
// overrides it in the official client).
const DefaultModelScopeEndpoint = "https://modelscope.cn"

// msDefaultRevision is the branch ModelScope's client downloads when none
// is given.
const msDefaultRevision = "master"

// msEnvelope is the legacy API's answer: Data, or Success false with a
// Message.
type msEnvelope[T any] struct {
	Code    any    `json:"Code"`
	Message string `json:"Message"`
	Success *bool  `json:"Success"`
	Data    T      `json:"Data"`
}

// failed turns a 200 whose envelope says Success false into an *Error.
func (e msEnvelope[T]) failed(what string) error {
	if e.Success == nil || *e.Success {
		return nil
	}
	return &Error{Status: http.StatusBadGateway, Message: fmt.Sprintf("ModelScope refused %s (code %v): %s", what, e.Code, e.Message)}
}

// commitID matches a commit id given as a revision.
var commitID = regexp.MustCompile(`^[0-9a-f]{7,64}$`)

// msInfo checks that repo has revision (a branch, a tag, or a commit id):
// GET /api/v1/models/{repo}/revisions. ModelScope's API names no commit
// for a branch, so the revision's name stands for it (the staging key of
// Fetch); every file's sha256 guards the content.
func (c *Client) msInfo(ctx context.Context, repo, revision string) (Info, error) {
	revision = cmp.Or(revision, msDefaultRevision)
	what := "model " + repo + "@" + revision
	var out msEnvelope[struct {
		RevisionMap struct {
			Branches []struct {
				Revision string `json:"Revision"`
			} `json:"Branches"`
			Tags []struct {
				Revision string `json:"Revision"`
			} `json:"Tags"`
		} `json:"RevisionMap"`
	}]
	if _, err := c.getJSON(ctx, c.endpoint+"/api/v1/models/"+repo+"/revisions", what, &out); err != nil {
		return Info{}, err
	}
	if err := out.failed(what); err != nil {
		return Info{}, err
	}
	var names []string
	for _, b := range out.Data.RevisionMap.Branches {
		names = append(names, b.Revision)
	}
	for _, t := range out.Data.RevisionMap.Tags {
		names = append(names, t.Revision)
	}
	if !slices.Contains(names, revision) && !commitID.MatchString(revision) {
		return Info{}, &Error{Status: http.StatusNotFound, Code: "RevisionNotFound",
			Message: fmt.Sprintf("404 Not Found: %s: no such branch or tag (it has %s)", what, strings.Join(names, ", "))}
	}
	return Info{ID: repo, SHA: revision}, nil
}

// msFiles lists the files of repo at revision:
// GET /api/v1/models/{repo}/repo/files?Revision=&Recursive=True, each
// with its Size and Sha256.
func (c *Client) msFiles(ctx context.Context, repo, revision string) ([]File, error) {
	what := "files of " + repo + "@" + revision
	q := url.Values{"Revision": {revision}, "Recursive": {"True"}}
	var out msEnvelope[struct {
		Files []struct {
			Path   string `json:"Path"`
			Type   string `json:"Type"`
			Size   int64  `json:"Size"`
			Sha256 string `json:"Sha256"`
		} `json:"Files"`
	}]
	if _, err := c.getJSON(ctx, c.endpoint+"/api/v1/models/"+repo+"/repo/files?"+q.Encode(), what, &out); err != nil {
		return nil, err
	}
	if err := out.failed(what); err != nil {
		return nil, err
	}
	var files []File
	for _, f := range out.Data.Files {
		if f.Type == "tree" || f.Path == "" {
			continue
		}
		files = append(files, File{Path: f.Path, Size: f.Size, SHA256: strings.ToLower(f.Sha256)})
	}
	return files, nil
}

// msFileURL is a file's download URL:
// /api/v1/models/{repo}/repo?Revision=&FilePath= (Range is honoured).
func (c *Client) msFileURL(repo, revision, path string) string {
	q := url.Values{"Revision": {revision}, "FilePath": {path}}
	return c.endpoint + "/api/v1/models/" + repo + "/repo?" + q.Encode()
}

// msSorts maps the Hub's sort names to ModelScope's.
var msSorts = map[string]string{"downloads": "downloads", "likes": "likes", "lastModified": "last_modified", "createdAt": "created_at"}

// msSearch lists models: GET /openapi/v1/models?search=&owner=&sort=
// &page_number=1&page_size= (filter.library for a library).
func (c *Client) msSearch(ctx context.Context, o SearchOptions) ([]Model, error) {
	q := url.Values{}
	if o.Search != "" {
		q.Set("search", o.Search)
	}
	if o.Author != "" {
		q.Set("owner", o.Author)
	}
	if o.Library != "" {
		q.Set("filter.library", o.Library)
	}
	if s, ok := msSorts[o.Sort]; ok {
		q.Set("sort", s)
	}
	limit := o.Limit
	if limit <= 0 {
		limit = 20
	}
	q.Set("page_number", "1")
	q.Set("page_size", strconv.Itoa(min(limit, MaxSearchLimit)))
	type msModel struct {
		ID           any      `json:"id"`
		Owner        string   `json:"owner"`
		Name         string   `json:"name"`
		Downloads    int64    `json:"downloads"`
		Likes        int64    `json:"likes"`
		Tags         []string `json:"tags"`
		Tasks        []string `json:"tasks"`
		LastModified any      `json:"last_modified"`
		Private      bool     `json:"private"`
		Gated        bool     `json:"gated"`
	}
	var out struct {
		Success *bool  `json:"success"`
		Message string `json:"message"`
		Data    struct {
			Models []msModel `json:"models"`
		} `json:"data"`
	}
	if _, err := c.getJSON(ctx, c.endpoint+"/openapi/v1/models?"+q.Encode(), "model search", &out); err != nil {
		return nil, err
	}
	if out.Success != nil && !*out.Success {
		return nil, &Error{Status: http.StatusBadGateway, Message: "ModelScope refused the model search: " + out.Message}
	}
	models := []Model{}
	for _, m := range out.Data.Models {
		id, _ := m.ID.(string)
		if !strings.Contains(id, "/") && m.Owner != "" && m.Name != "" {
			id = m.Owner + "/" + m.Name
		}
		if id == "" {
			continue
		}
		mod := Model{ID: id, Author: cmp.Or(m.Owner, strings.Split(id, "/")[0]), Downloads: m.Downloads, Likes: m.Likes,
			Tags: m.Tags, Private: m.Private, LibraryName: o.Library}
		if len(m.Tasks) > 0 {
			mod.PipelineTag = m.Tasks[0]
		}
		if m.Gated {
			mod.Gated = "manual"
		}
		switch v := m.LastModified.(type) {
		case string:
			mod.LastModified = v
		case float64: // Unix seconds
			mod.LastModified = time.Unix(int64(v), 0).UTC().Format(time.RFC3339)
		}
		models = append(models, mod)
	}
	return models, nil
}
