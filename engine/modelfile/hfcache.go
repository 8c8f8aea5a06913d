package modelfile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
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
	if cacheDir == "" || strings.Count(repo, "/") != 1 || strings.Contains(repo, "..") {
		return "", "", false
	}
	if revision == "" {
		revision = "main"
	}
	root := filepath.Join(cacheDir, "models--"+strings.ReplaceAll(repo, "/", "--"))
	commit = revision
	if !commitHash.MatchString(revision) {
		if !filepath.IsLocal(revision) {
			return "", "", false
		}
		b, err := os.ReadFile(filepath.Join(root, "refs", filepath.FromSlash(revision)))
		if err != nil {
			return "", "", false
		}
		commit = strings.TrimSpace(string(b))
		if !commitHash.MatchString(commit) {
			return "", "", false
		}
	}
	dir = filepath.Join(root, "snapshots", commit)
	if !SnapshotComplete(dir) {
		return "", "", false
	}
	return dir, commit, true
}

// SnapshotComplete reports whether dir is a whole model: a config.json or
// a diffusers model_index.json, and every shard its safetensors index
// (model.safetensors.index.json) names, or a model.safetensors, links
// resolved. A snapshot huggingface_hub filled only in part (an
// interrupted download, allow_patterns) is not one.
func SnapshotComplete(dir string) bool {
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

// DiscoverHFCache lists the models of the HF cache cacheDir: each
// models--ORG--NAME whose refs/main names a complete snapshot
// (HFSnapshot), named ORG/NAME, its path the snapshot directory. A
// missing cache lists nothing. The list is sorted by name.
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
		if dir, _, ok := HFSnapshot(cacheDir, repo, "main"); ok {
			out = append(out, Entry{Name: repo, Path: dir, Kind: KindSafetensors})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
