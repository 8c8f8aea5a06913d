package hub

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"fusion/engine/modelfile"
)

// Errors of Fetch that callers branch on.
var (
	// ErrNoSpace: the files left to fetch do not fit in the free space
	// (less the space to keep free); nothing was fetched.
	ErrNoSpace = errors.New("hub: not enough disk space")
	// ErrExists: the model is already in the models directory.
	ErrExists = errors.New("hub: model already in the models directory")
	// ErrNoFiles: the allow patterns select no file of the repo.
	ErrNoFiles = errors.New("hub: no file matches")
)

// Request names what to download.
type Request struct {
	Repo     string   `json:"repo"`
	Revision string   `json:"revision,omitempty"` // branch, tag or commit (default main)
	Allow    []string `json:"allow_patterns,omitempty"`
}

// FetchOptions configure Fetch.
type FetchOptions struct {
	ModelsDir string
	// Name is the model's name in the models directory (default the
	// repo's name without its owner).
	Name string
	// MinFree is the space to leave free on the models directory's file
	// system; FreeBytes reads the free space (default the package's
	// FreeBytes, statfs).
	MinFree   int64
	FreeBytes func(dir string) (int64, error)
	// Parallel is how many files download at once (default 4).
	Parallel int
	// Parts is how many ranged requests fetch one large file at once
	// (default DefaultParts; 1 fetches every file in one stream), each
	// part at least MinPart bytes (default DefaultMinPart): a file below
	// 2*MinPart is one stream.
	Parts   int
	MinPart int64
	// Progress is called with the bytes on disk and the bytes of the
	// selected files, as they grow (from several goroutines, serialized).
	Progress func(done, total int64)
	// Log gets one line per step worth telling (may be nil).
	Log func(msg string)
	// HFCache is a Hugging Face cache directory (huggingface_hub's
	// layout): when it holds the requested revision complete, Fetch
	// answers from it at once (Result.FromCache) and asks the Hub
	// nothing. "" = none; ignored for ModelScope. Never written.
	HFCache string
	// Force downloads even when HFCache holds the revision.
	Force bool
}

// Result says what Fetch put where.
type Result struct {
	Model  string   `json:"model"`  // its name in the models directory
	Paths  []string `json:"paths"`  // what was renamed into the models directory
	Commit string   `json:"commit"` // the revision's commit
	Files  int      `json:"files"`
	Bytes  int64    `json:"bytes"`
	// Resumed is the bytes that were already on disk when it started.
	Resumed int64 `json:"resumed_bytes"`
	// FromCache: nothing was downloaded, the revision is complete in the
	// HF cache; Model is then the repo (the name it is served as) and
	// Paths its snapshot directory.
	FromCache bool `json:"from_cache,omitempty"`
}

// Defaults of FetchOptions.Parts and MinPart.
const (
	DefaultParts   = 4
	DefaultMinPart = 64 << 20
)

// split is the Split of o's Parts and MinPart, defaults filled in.
func (o FetchOptions) split() Split {
	s := Split{Parts: o.Parts, MinPart: o.MinPart}
	if s.Parts == 0 {
		s.Parts = DefaultParts
	}
	if s.MinPart <= 0 {
		s.MinPart = DefaultMinPart
	}
	return s
}

// DownloadsDir is the hidden folder of a models directory where
// downloads are staged (model discovery skips hidden entries).
const DownloadsDir = ".downloads"

// Fetch downloads the files of req's repo at its revision that its allow
// patterns select into o.ModelsDir: staged under DownloadsDir (each file
// as NAME.incomplete until its checksum matches), then renamed into
// place, so a model appears whole or not at all. A Fetch stopped part way
// resumes from the staged bytes when run again for the same commit.
// Before fetching anything it refuses with ErrNoSpace when the bytes left
// do not fit.
func Fetch(ctx context.Context, c *Client, req Request, o FetchOptions) (Result, error) {
	logf := func(format string, args ...any) {
		if o.Log != nil {
			o.Log(fmt.Sprintf(format, args...))
		}
	}
	if err := CheckRepo(req.Repo); err != nil {
		return Result{}, err
	}
	name := o.Name
	if name == "" {
		name = path.Base(req.Repo)
	}
	if !filepath.IsLocal(name) || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return Result{}, fmt.Errorf("hub: model name %q is not a plain name", name)
	}
	if res, ok := fromCache(c, req, o); ok {
		logf("%s at %s is complete in the HF cache: %s (nothing downloaded)", req.Repo, orMain(req.Revision), res.Paths[0])
		return res, nil
	}
	sel, err := selectFiles(ctx, c, req, name)
	if err != nil {
		return Result{}, err
	}
	if c.modelScope() {
		logf("%s at revision %s, from ModelScope", req.Repo, sel.Commit)
	} else {
		logf("%s at %s is commit %s", req.Repo, orMain(req.Revision), sel.Commit)
	}
	files, ggufOnly := sel.files, sel.ggufOnly
	// Where the model lands: a directory, or for a selection of GGUF
	// files without a config.json, the .gguf files themselves.
	targets := []string{filepath.Join(o.ModelsDir, name)} // final paths, checked free first
	if ggufOnly {
		targets = nil
		for _, f := range files {
			if strings.EqualFold(path.Ext(f.Path), ".gguf") {
				targets = append(targets, filepath.Join(o.ModelsDir, path.Base(f.Path)))
			}
		}
	}
	for _, t := range targets {
		if _, err := os.Lstat(t); err == nil {
			return Result{}, fmt.Errorf("%w: %s", ErrExists, t)
		}
	}
	stage := filepath.Join(o.ModelsDir, DownloadsDir, strings.ReplaceAll(req.Repo, "/", "--")+"--"+sel.Commit)
	res := Result{Model: name, Commit: sel.Commit, Files: len(files)}
	var total, need int64
	have := make([]int64, len(files))
	for i, f := range files {
		total += f.Size
		if st, err := os.Stat(filepath.Join(stage, filepath.FromSlash(f.Path))); err == nil && st.Size() == f.Size {
			have[i] = f.Size // verified before its rename
		} else {
			have[i] = stagedBytes(partPath(stage, f), f.Size)
		}
		res.Resumed += have[i]
		need += f.Size - have[i]
	}
	res.Bytes = total
	free := o.FreeBytes
	if free == nil {
		free = FreeBytes
	}
	if n, err := free(o.ModelsDir); err == nil && n-need < o.MinFree {
		return Result{}, fmt.Errorf("%w: %s needs %s more, %s is free and %s must stay free on %s",
			ErrNoSpace, req.Repo, human(need), human(n), human(o.MinFree), o.ModelsDir)
	} else if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return Result{}, fmt.Errorf("hub: free space of %s: %w", o.ModelsDir, err)
	}
	if err := os.MkdirAll(stage, 0o755); err != nil {
		return Result{}, fmt.Errorf("hub: %w", err)
	}
	if res.Resumed > 0 {
		logf("resuming: %s of %s already on disk", human(res.Resumed), human(total))
	}
	logf("fetching %d files, %s", len(files), human(need))
	if err := fetchAll(ctx, c, req.Repo, sel.Commit, files, have, stage, o, logf); err != nil {
		return Result{}, err
	}
	// Into place.
	if ggufOnly {
		for _, f := range files {
			if !strings.EqualFold(path.Ext(f.Path), ".gguf") {
				continue
			}
			dst := filepath.Join(o.ModelsDir, path.Base(f.Path))
			if err := os.Rename(filepath.Join(stage, filepath.FromSlash(f.Path)), dst); err != nil {
				return Result{}, fmt.Errorf("hub: %w", err)
			}
			res.Paths = append(res.Paths, dst)
		}
		res.Model = sel.Model
		if err := os.RemoveAll(stage); err != nil {
			return Result{}, fmt.Errorf("hub: %w", err)
		}
	} else {
		if err := os.Rename(stage, targets[0]); err != nil {
			return Result{}, fmt.Errorf("hub: %w", err)
		}
		res.Paths = targets
	}
	logf("done: %s", strings.Join(res.Paths, ", "))
	return res, nil
}

// Selection is what a download of a request would fetch, and the model
// it would make (Plan).
type Selection struct {
	// Model is the name the model gets in the models directory: the
	// request's name (default the repo's), or for a selection of GGUF
	// files without a config.json, the first GGUF file's name without
	// its extension (each GGUF file is then a model of its own).
	Model  string `json:"model"`
	Commit string `json:"commit"`
	Files  int    `json:"files"`
	// Bytes is the size of every selected file; WeightBytes that of the
	// weights among them (safetensors and GGUF files).
	Bytes       int64 `json:"bytes"`
	WeightBytes int64 `json:"weight_bytes"`
	// Models is how many models the selection makes: 1, or the number of
	// GGUF files of a GGUF-only selection.
	Models int `json:"models"`

	files    []File
	ggufOnly bool
}

// Plan says what Fetch of req would fetch, asking the Hub for the
// revision's file list and fetching nothing. name is as FetchOptions.Name.
func Plan(ctx context.Context, c *Client, req Request, name string) (Selection, error) {
	if err := CheckRepo(req.Repo); err != nil {
		return Selection{}, err
	}
	if name == "" {
		name = path.Base(req.Repo)
	}
	return selectFiles(ctx, c, req, name)
}

// selectFiles lists the revision's files that req's allow patterns
// select, and the model they make.
func selectFiles(ctx context.Context, c *Client, req Request, name string) (Selection, error) {
	info, err := c.Info(ctx, req.Repo, req.Revision)
	if err != nil {
		return Selection{}, err
	}
	all, err := c.Files(ctx, req.Repo, info.SHA)
	if err != nil {
		return Selection{}, err
	}
	sel := Selection{Model: name, Commit: info.SHA, Models: 1}
	for _, f := range all {
		if !filepath.IsLocal(filepath.FromSlash(f.Path)) || f.Size < 0 {
			return Selection{}, fmt.Errorf("hub: %s lists a file with an unsafe path %q", req.Repo, f.Path)
		}
		if path.Base(f.Path) == ".gitattributes" && len(req.Allow) == 0 {
			continue
		}
		if MatchAny(req.Allow, f.Path) {
			sel.files = append(sel.files, f)
		}
	}
	if len(sel.files) == 0 {
		return Selection{}, fmt.Errorf("%w: %s has %d files, none matches %q", ErrNoFiles, req.Repo, len(all), req.Allow)
	}
	sel.ggufOnly = true
	ggufs := 0
	for _, f := range sel.files {
		gguf := strings.EqualFold(path.Ext(f.Path), ".gguf")
		if f.Path == "config.json" || !gguf && isWeights(f.Path) {
			sel.ggufOnly = false
		}
		if gguf {
			if ggufs == 0 {
				sel.Model = strings.TrimSuffix(path.Base(f.Path), path.Ext(f.Path))
			}
			ggufs++
		}
		if gguf || strings.HasSuffix(f.Path, ".safetensors") {
			sel.WeightBytes += f.Size
		}
		sel.Bytes += f.Size
	}
	sel.Files = len(sel.files)
	if !sel.ggufOnly || ggufs == 0 {
		sel.ggufOnly, sel.Model = false, name
	} else {
		sel.Models = ggufs
	}
	return sel, nil
}

// fetchAll downloads the files not yet whole, o.Parallel at a time; a
// file failing its checksum is fetched once more from its start.
func fetchAll(ctx context.Context, c *Client, repo, commit string, files []File, have []int64, stage string, o FetchOptions, logf func(string, ...any)) error {
	var total int64
	for _, f := range files {
		total += f.Size
	}
	var mu sync.Mutex
	report := func() {
		if o.Progress == nil {
			return
		}
		var done int64
		for _, n := range have {
			done += n
		}
		o.Progress(done, total)
	}
	mu.Lock()
	report()
	mu.Unlock()
	par := o.Parallel
	if par <= 0 {
		par = 4
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	for i, f := range files {
		final := filepath.Join(stage, filepath.FromSlash(f.Path))
		if st, err := os.Stat(final); err == nil && st.Size() == f.Size {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			progress := func(n int64) {
				mu.Lock()
				have[i] = n
				report()
				mu.Unlock()
			}
			err := fetchOne(ctx, c, repo, commit, f, final, o.split(), progress, logf)
			if err != nil {
				firstErr.CompareAndSwap(nil, &err)
				cancel()
			}
		}()
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return *p
	}
	return ctx.Err()
}

// fetchOne downloads f into its .incomplete file and renames it to final
// once it checks out.
func fetchOne(ctx context.Context, c *Client, repo, commit string, f File, final string, split Split, progress func(int64), logf func(string, ...any)) error {
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	part := final + ".incomplete"
	err := c.DownloadFileSplit(ctx, repo, commit, f, part, split, progress)
	if errors.Is(err, ErrChecksum) {
		logf("%v: fetching %s again", err, f.Path)
		for _, p := range []string{part, part + partsSuffix} {
			if rerr := os.Remove(p); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
				return fmt.Errorf("hub: %w", rerr)
			}
		}
		progress(0)
		err = c.DownloadFileSplit(ctx, repo, commit, f, part, split, progress)
	}
	if err != nil {
		return err
	}
	if err := os.Rename(part, final); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	return nil
}

func partPath(stage string, f File) string {
	return filepath.Join(stage, filepath.FromSlash(f.Path)) + ".incomplete"
}

// isWeights reports whether p is a weights file a model directory holds.
func isWeights(p string) bool {
	return strings.HasSuffix(p, ".safetensors") || strings.HasSuffix(p, ".safetensors.index.json")
}

func orMain(rev string) string {
	if rev == "" {
		return "main"
	}
	return rev
}

// human prints a byte count.
func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// fromCache answers req from the HF cache o.HFCache when the revision's
// snapshot there is complete (modelfile.HFEntries: a safetensors model,
// or GGUF files) and, with allow patterns, every pattern matches one of
// its files. The result names the model as the runner lists it (ORG/NAME,
// ORG/NAME@REV for a revision main does not name; for a GGUF snapshot
// the GGUF files the patterns select, the first one's name).
func fromCache(c *Client, req Request, o FetchOptions) (Result, bool) {
	if o.HFCache == "" || o.Force || c.modelScope() {
		return Result{}, false
	}
	entries, commit, ok := modelfile.HFEntries(o.HFCache, req.Repo, req.Revision)
	if !ok {
		return Result{}, false
	}
	dir, _, ok := modelfile.HFSnapshot(o.HFCache, req.Repo, commit)
	if !ok {
		return Result{}, false
	}
	var files []string
	sizes := map[string]int64{}
	var size int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		st, err := os.Stat(p) // through the link into blobs/
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files = append(files, filepath.ToSlash(rel))
		sizes[p] = st.Size()
		size += st.Size()
		return nil
	})
	if err != nil {
		return Result{}, false
	}
	for _, pat := range req.Allow {
		if !slices.ContainsFunc(files, func(f string) bool { return Match(pat, f) }) {
			return Result{}, false
		}
	}
	if entries[0].Kind != modelfile.KindGGUF {
		return Result{Model: entries[0].Name, Paths: []string{dir}, Commit: commit, Files: len(files), Bytes: size, FromCache: true}, true
	}
	// GGUF files: those the patterns select (all without patterns, or
	// when the patterns name none of them).
	var sel []modelfile.Entry
	for _, e := range entries {
		if MatchAny(req.Allow, filepath.Base(e.Path)) {
			sel = append(sel, e)
		}
	}
	if len(sel) == 0 {
		sel = entries
	}
	res := Result{Model: sel[0].Name, Commit: commit, Files: len(sel), FromCache: true}
	for _, e := range sel {
		res.Paths = append(res.Paths, e.Path)
		res.Bytes += sizes[e.Path]
	}
	return res, true
}
