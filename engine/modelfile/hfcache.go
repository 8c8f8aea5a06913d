package modelfile

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// The Hugging Face cache, as huggingface_hub lays it out:
//
//	<cache>/models--ORG--NAME/refs/<revision>     the commit the revision was at
//	<cache>/models--ORG--NAME/snapshots/<commit>/ the files, as links into blobs/
//	<cache>/models--ORG--NAME/blobs/<etag>        the contents
//
// It is only read here, never written.

// commitHash matches a full git commit id.
var commitHash = regexp.MustCompile(`^[0-9a-f]{40}$`)

// HFCacheDir is the Hugging Face cache the way huggingface_hub finds it:
// $HF_HUB_CACHE, else the legacy $HUGGINGFACE_HUB_CACHE, else
// $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub ("" if no home directory is known), as
// huggingface_hub's constants.py resolves it.
// getenv reads the environment (nil: os.Getenv).
func HFCacheDir(getenv func(string) string) string {
	if getenv == nil {
		getenv = os.Getenv
	}
	for _, k := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if d := getenv(k); d != "" {
			return d
		}
	}
	if d := getenv("HF_HOME"); d != "" {
		return filepath.Join(d, "hub")
	}
	if d := getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "huggingface", "hub")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "huggingface", "hub")
}

// HFSnapshot is the snapshot directory of repo ("org/name") at revision
// (a branch or tag with a refs/ file, or a commit; default main) in the
// HF cache cacheDir, and its commit; ok is false when the cache has no
// complete snapshot of it (SnapshotComplete).
func HFSnapshot(cacheDir, repo, revision string) (dir, commit string, ok bool) {
	root, commit, ok := hfCommit(cacheDir, repo, revision)
	if !ok {
		return "", "", false
	}
	dir = filepath.Join(root, "snapshots", commit)
	if !SnapshotComplete(dir) {
		return "", "", false
	}
	return dir, commit, true
}

// hfCommit is the repo's folder in the cache and the commit revision
// names (a ref's, or the revision itself when it is a commit id).
func hfCommit(cacheDir, repo, revision string) (root, commit string, ok bool) {
	if cacheDir == "" || strings.Count(repo, "/") != 1 || strings.Contains(repo, "..") {
		return "", "", false
	}
	if revision == "" {
		revision = "main"
	}
	root = filepath.Join(cacheDir, "models--"+strings.ReplaceAll(repo, "/", "--"))
	if commitHash.MatchString(revision) {
		return root, revision, true
	}
	if !filepath.IsLocal(revision) {
		return "", "", false
	}
	b, err := os.ReadFile(filepath.Join(root, "refs", filepath.FromSlash(revision)))
	if err != nil {
		return "", "", false
	}
	commit = strings.TrimSpace(string(b))
	return root, commit, commitHash.MatchString(commit)
}

// HFEntries are the models the snapshot of repo at revision (as
// HFSnapshot resolves it) is served as, named as DiscoverHFCache names
// them, and its commit; ok is false when it is not complete.
func HFEntries(cacheDir, repo, revision string) (entries []Entry, commit string, ok bool) {
	root, commit, ok := hfCommit(cacheDir, repo, revision)
	if !ok {
		return nil, "", false
	}
	entries = snapshotEntries(repo, revisionSuffix(hfRefs(root), commit), filepath.Join(root, "snapshots", commit))
	return entries, commit, len(entries) > 0
}

// SnapshotComplete reports whether dir is a whole model: a config.json or
// a diffusers model_index.json, and every shard its safetensors index
// (model.safetensors.index.json) names, or a model.safetensors, links
// resolved; or else, with no such model, one or more GGUF files at its
// top (a GGUF repo, or the quants of one an allow pattern selected). A
// snapshot huggingface_hub filled only in part (an interrupted download,
// allow_patterns without the weights) is not one; huggingface_hub links
// a file into a snapshot only once it is whole.
func SnapshotComplete(dir string) bool {
	return safetensorsComplete(dir) || len(snapshotGGUFs(dir)) > 0
}

func safetensorsComplete(dir string) bool {
	if regularFile(filepath.Join(dir, DiffusersIndexFile)) {
		return true // its components are checked when it loads
	}
	if !regularFile(filepath.Join(dir, ConfigFile)) {
		return false
	}
	b, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	if err != nil {
		if regularFile(filepath.Join(dir, "model.safetensors")) {
			return true
		}
		// Other layouts (a CTranslate2 model.bin, weights in subfolders):
		// any weights file at the top.
		ws, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
		bins, _ := filepath.Glob(filepath.Join(dir, "*.bin"))
		for _, w := range append(ws, bins...) {
			if regularFile(w) {
				return true
			}
		}
		return false
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if json.Unmarshal(b, &idx) != nil || len(idx.WeightMap) == 0 {
		return false
	}
	for _, shard := range idx.WeightMap {
		if !filepath.IsLocal(shard) || !regularFile(filepath.Join(dir, shard)) {
			return false
		}
	}
	return true
}

// snapshotGGUFs lists the GGUF files at the top of dir whose links
// resolve, sorted.
func snapshotGGUFs(dir string) []string {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, de := range des {
		p := filepath.Join(dir, de.Name())
		if strings.EqualFold(filepath.Ext(de.Name()), ".gguf") && regularFile(p) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// snapshotEntries are the models of a snapshot of repo: the directory,
// named repo+suffix, when it is a safetensors (or diffusers) model; else
// its GGUF file, named repo+suffix when it is the only one, or each of its
// GGUF files, named repo/STEM+suffix (STEM the file's name without
// .gguf). None when the snapshot is not complete.
func snapshotEntries(repo, suffix, dir string) []Entry {
	if safetensorsComplete(dir) {
		return []Entry{{Name: repo + suffix, Path: dir, Kind: KindSafetensors}}
	}
	ggufs := snapshotGGUFs(dir)
	var out []Entry
	for _, g := range ggufs {
		name := repo + suffix
		if len(ggufs) > 1 {
			base := filepath.Base(g)
			name = repo + "/" + strings.TrimSuffix(base, filepath.Ext(base)) + suffix
		}
		out = append(out, Entry{Name: name, Path: g, Kind: KindGGUF})
	}
	return out
}

// hfRefs maps each commit of a cached repo to the refs naming it
// (refs/<branch or tag>, refs/pr/N), sorted.
func hfRefs(root string) map[string][]string {
	out := map[string][]string{}
	refs := filepath.Join(root, "refs")
	_ = filepath.WalkDir(refs, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		if c := strings.TrimSpace(string(b)); commitHash.MatchString(c) {
			rel, _ := filepath.Rel(refs, p)
			out[c] = append(out[c], filepath.ToSlash(rel))
		}
		return nil
	})
	for _, rs := range out {
		sort.Strings(rs)
	}
	return out
}

// revisionSuffix is what a snapshot's model names end with: nothing for
// the commit refs/main names, else "@REF" (the first ref naming it), else
// "@COMMIT" (a snapshot downloaded at a pinned commit, or one main named
// before it moved on).
func revisionSuffix(refs map[string][]string, commit string) string {
	rs := refs[commit]
	switch {
	case slices.Contains(rs, "main"):
		return ""
	case len(rs) > 0:
		return "@" + rs[0]
	}
	return "@" + commit
}

// DiscoverHFCache lists the models of the HF cache cacheDir: the complete
// snapshots (SnapshotComplete) of every models--ORG--NAME, the one
// refs/main names as ORG/NAME, the others as ORG/NAME@REF (another branch
// or tag naming it) or ORG/NAME@COMMIT (no ref names it: a download
// pinned to a commit); a GGUF snapshot with several GGUF files lists each
// as ORG/NAME/STEM[@...]. Paths are the snapshot directory, or the GGUF
// file. A missing cache lists nothing. The list is sorted by name.
func DiscoverHFCache(cacheDir string) []Entry {
	if cacheDir == "" {
		return nil
	}
	des, err := os.ReadDir(cacheDir)
	if err != nil {
		return nil
	}
	var out []Entry
	for _, de := range des {
		rest, ok := strings.CutPrefix(de.Name(), "models--")
		if !ok || !de.IsDir() {
			continue
		}
		org, name, ok := strings.Cut(rest, "--")
		if !ok || org == "" || name == "" || strings.Contains(name, "--") {
			continue
		}
		repo := org + "/" + name
		root := filepath.Join(cacheDir, de.Name())
		snaps, err := os.ReadDir(filepath.Join(root, "snapshots"))
		if err != nil {
			continue
		}
		refs := hfRefs(root)
		for _, sn := range snaps {
			if !sn.IsDir() || !commitHash.MatchString(sn.Name()) {
				continue
			}
			out = append(out, snapshotEntries(repo, revisionSuffix(refs, sn.Name()), filepath.Join(root, "snapshots", sn.Name()))...)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
