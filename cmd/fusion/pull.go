package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"fusion/engine/modelfile"
	"fusion/hub"
	"fusion/jobs"
	"fusion/node"
	"fusion/router/admin"
)

const pullUsage = `usage: fusion models pull [flags] OWNER/NAME

Downloads a model repository from the Hugging Face Hub (or the Hub at
--hf-endpoint / $HF_ENDPOINT), or with --source modelscope from ModelScope
(--modelscope-endpoint / $MODELSCOPE_ENDPOINT, token --modelscope-token /
$MODELSCOPE_API_TOKEN), into a models directory: every file, or the
files the --include patterns select (fnmatch, as huggingface_hub's
allow_patterns: --include '*Q4_K_M.gguf' takes one GGUF quant). Files are
checked against the listed sha256 and land in place only when all are
complete; a pull stopped part way resumes from what is on disk. A repo
whose revision is already complete in the Hugging Face cache (--hf-cache,
or the node's) is not downloaded again: the pull answers at once with the
snapshot's path (served as OWNER/NAME), unless --force.

Without --addr it downloads here, into --models-dir. With --addr it asks
that running node (or, with --node, another node of its cluster) to run
the download as a job, and follows its progress. With --replicas,
--stages or --pin as well, the model goes to every node a placement of
that shape takes (pinned nodes first, then nodes that have it, then the
most memory; with no --stages, as few stages as its weights need): one
job starts a download on each such node and, once all are done, stores
the placement, so the cluster loads the model there.

`

// stringsFlag collects a repeated flag.
type stringsFlag []string

func (s *stringsFlag) String() string { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error {
	*s = append(*s, v)
	return nil
}

func runPull(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("models pull", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, pullUsage); fs.PrintDefaults() }
	var include stringsFlag
	fs.Var(&include, "include", "download only the files matching this pattern (repeatable)")
	source := fs.String("source", "hf", "where from: hf (Hugging Face) or modelscope")
	revision := fs.String("revision", "", "branch, tag or commit (default main; master on ModelScope)")
	name := fs.String("name", "", "the model's name in the models directory (default the repo's name)")
	modelsDir := fs.String("models-dir", "~/.fusion/models", "models directory (without --addr)")
	endpoint := fs.String("hf-endpoint", "", "the Hub (default $HF_ENDPOINT, else "+hub.DefaultEndpoint+"; without --addr)")
	token := fs.String("hf-token", "", "Hugging Face token for gated and private repos (default $HF_TOKEN; without --addr)")
	msEndpoint := fs.String("modelscope-endpoint", "", "ModelScope (default $MODELSCOPE_ENDPOINT, else "+hub.DefaultModelScopeEndpoint+"; without --addr)")
	msToken := fs.String("modelscope-token", "", "ModelScope access token for private repos (default $MODELSCOPE_API_TOKEN; without --addr)")
	minFree := fs.Int64("min-free-disk", node.DefaultMinFreeDisk, "bytes the download must leave free on the disk (without --addr)")
	parts := fs.Int("parts", hub.DefaultParts, "ranged requests that fetch one large file at once; 1 = one stream a file (without --addr)")
	minPart := fs.Int64("min-part", hub.DefaultMinPart, "bytes of one ranged part at least (without --addr)")
	addr := fs.String("addr", "", "a running node's HTTP address: the node downloads, as a job")
	apiKey := fs.String("api-key", "", "API key of the node (env FUSION_API_KEY)")
	caFile := fs.String("ca", "", "PEM CA certificate to trust for an https:// address")
	onNode := fs.String("node", "", "with --addr: the cluster node that downloads (default the one at --addr)")
	hfCache := fs.String("hf-cache", modelfile.HFCacheDir(nil), `Hugging Face cache whose complete snapshots are not downloaded again ("" = none; without --addr)`)
	force := fs.Bool("force", false, "download even when the revision is complete in the Hugging Face cache")
	replicas := fs.Int("replicas", 0, "with --addr: download to the nodes a placement of this many replicas takes, then place it")
	stages := fs.Int("stages", 0, "with --addr: pipeline stages of each replica of the placement (0: as few as the weights need)")
	var pin stringsFlag
	fs.Var(&pin, "pin", "with --addr: a node the placement prefers (repeatable, best first)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("give one repository, OWNER/NAME")
	}
	req := hub.Request{Repo: fs.Arg(0), Revision: *revision, Allow: include}
	if err := hub.CheckRepo(req.Repo); err != nil {
		return usagef("%v", err)
	}
	if *source != hub.SourceHF && *source != hub.SourceModelScope {
		return usagef("--source must be hf or modelscope, not %q", *source)
	}
	var placement *admin.DownloadPlacement
	if *replicas != 0 || *stages != 0 || len(pin) > 0 {
		if *addr == "" {
			return usagef("--replicas, --stages and --pin place the model in a cluster: give --addr")
		}
		placement = &admin.DownloadPlacement{Replicas: *replicas, Stages: *stages, Pin: pin}
	}
	if *addr != "" {
		return pullOnNode(ctx, *addr, *apiKey, *caFile, *onNode, *name, *source, *force, placement, req, stdout, stderr)
	}
	if *source == hub.SourceModelScope {
		*endpoint = cmp.Or(*msEndpoint, os.Getenv("MODELSCOPE_ENDPOINT"))
		*token = cmp.Or(*msToken, os.Getenv("MODELSCOPE_API_TOKEN"))
	} else {
		*endpoint = cmp.Or(*endpoint, os.Getenv("HF_ENDPOINT"))
		*token = cmp.Or(*token, os.Getenv("HF_TOKEN"))
	}
	if *parts < 1 || *minPart < 1 {
		return usagef("--parts and --min-part must be at least 1")
	}
	dir := expandHome(*modelsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	c := hub.New(hub.Options{Source: *source, Endpoint: *endpoint, Token: *token})
	p := &progressLine{w: stderr}
	res, err := hub.Fetch(ctx, c, req, hub.FetchOptions{ModelsDir: dir, Name: *name, MinFree: *minFree, Parts: *parts, MinPart: *minPart,
		HFCache: expandHome(*hfCache), Force: *force, Progress: p.update, Log: func(msg string) { p.log(msg) }})
	p.end()
	if err != nil {
		return err
	}
	if res.FromCache {
		fmt.Fprintf(stdout, "%s: commit %s is complete in the Hugging Face cache, not downloaded: %s\n", res.Model, res.Commit, res.Paths[0])
		return nil
	}
	fmt.Fprintf(stdout, "%s: %d files, %d bytes, commit %s, in %s\n", res.Model, res.Files, res.Bytes, res.Commit, strings.Join(res.Paths, ", "))
	return nil
}

// progressLine prints a job's progress at most twice a second.
type progressLine struct {
	w    io.Writer
	unit string // "bytes" (default) or "steps"
	last time.Time
}

func (p *progressLine) update(done, total int64) {
	if time.Since(p.last) < 500*time.Millisecond && done != total {
		return
	}
	p.last = time.Now()
	pct := 0.0
	if total > 0 {
		pct = float64(done) * 100 / float64(total)
	}
	unit := p.unit
	if unit == "" {
		unit = "bytes"
	}
	fmt.Fprintf(p.w, "\r%5.1f%%  %d / %d %s", pct, done, total, unit)
}

func (p *progressLine) log(msg string) { fmt.Fprintf(p.w, "\r%s\n", msg) }
func (p *progressLine) end()           { fmt.Fprintln(p.w) }

// pullOnNode starts the download as a job on a running node and follows
// its event stream until it ends.
func pullOnNode(ctx context.Context, addr, apiKey, caFile, onNode, name, source string, force bool, placement *admin.DownloadPlacement, req hub.Request, stdout, stderr io.Writer) error {
	body := admin.DownloadRequest{Source: source, Repo: req.Repo, Revision: req.Revision, Allow: req.Allow, Name: name, Node: onNode, Force: force, Placement: placement}
	j, err := runJobOnNode(ctx, addr, apiKey, caFile, "/admin/api/hf/download", body, stderr)
	if err != nil {
		return err
	}
	if placement != nil {
		var res admin.PlacementResult
		if err := json.Unmarshal(j.Result, &res); err != nil {
			return fmt.Errorf("job %s: result: %w", j.ID, err)
		}
		fmt.Fprintf(stdout, "%s: on %s (%d replica(s) of %d stage(s); fetched to %d node(s), %d bytes each); placement stored\n",
			res.Model, strings.Join(res.Nodes, ", "), res.Placement.Replicas, res.Stages, len(res.Downloads), res.Bytes)
		return nil
	}
	var res hub.Result
	if err := json.Unmarshal(j.Result, &res); err != nil {
		return fmt.Errorf("job %s: result: %w", j.ID, err)
	}
	if res.FromCache {
		fmt.Fprintf(stdout, "%s: commit %s is complete in node %s's Hugging Face cache, not downloaded: %s\n", res.Model, res.Commit, j.Node, strings.Join(res.Paths, ", "))
		return nil
	}
	fmt.Fprintf(stdout, "%s: %d files, %d bytes, commit %s, on node %s in %s\n", res.Model, res.Files, res.Bytes, res.Commit, j.Node,
		strings.Join(relPaths(res.Paths), ", "))
	return nil
}

// jobRecordWait bounds how long a job's record may take to be readable
// on the node that started it.
const jobRecordWait = 10 * time.Second

// runJobOnNode posts body to a running node's job route (path), follows
// the job's event stream (its log and progress on stderr) and returns
// its final record: an error unless it is done.
func runJobOnNode(ctx context.Context, addr, apiKey, caFile, path string, reqBody any, stderr io.Writer) (jobs.Job, error) {
	client, err := nodeClient(caFile)
	if err != nil {
		return jobs.Job{}, err
	}
	if apiKey == "" {
		apiKey = os.Getenv("FUSION_API_KEY")
	}
	body, _ := json.Marshal(reqBody)
	send := func(method, url string, body []byte, accept string) (*http.Response, error) {
		r, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
		if err != nil {
			return nil, usagef("--addr: %v", err)
		}
		if apiKey != "" {
			r.Header.Set("Authorization", "Bearer "+apiKey)
		}
		if body != nil {
			r.Header.Set("Content-Type", "application/json")
		}
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		return client.Do(r)
	}
	base := nodeURL(addr)
	resp, err := send(http.MethodPost, base+path, body, "")
	if err != nil {
		return jobs.Job{}, err
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return jobs.Job{}, fmt.Errorf("%s: %s: %s", base, resp.Status, strings.TrimSpace(string(b)))
	}
	var j jobs.Job
	if err := json.Unmarshal(b, &j); err != nil {
		return jobs.Job{}, fmt.Errorf("%s: %w", base, err)
	}
	fmt.Fprintf(stderr, "job %s on node %s\n", j.ID, j.Node)
	// In a cluster the record reaches the node asked a commit after the
	// leader has it: a 404 at first is retried for a while.
	for wait := time.Now().Add(jobRecordWait); ; {
		resp, err = send(http.MethodGet, base+"/admin/api/jobs/"+j.ID, nil, "text/event-stream")
		if err != nil {
			return jobs.Job{}, err
		}
		if resp.StatusCode == http.StatusOK {
			break
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || time.Now().After(wait) {
			return j, fmt.Errorf("job %s: %s: %s", j.ID, resp.Status, strings.TrimSpace(string(b)))
		}
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	defer resp.Body.Close()
	p := &progressLine{w: stderr, unit: j.Progress.Unit}
	logged := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || event != "job" {
			continue
		}
		if err := json.Unmarshal([]byte(data), &j); err != nil {
			return jobs.Job{}, fmt.Errorf("job stream: %w", err)
		}
		for _, l := range j.Log[min(logged, len(j.Log)):] {
			p.log(l)
		}
		logged = len(j.Log)
		p.unit = j.Progress.Unit
		p.update(j.Progress.Done, j.Progress.Total)
		if jobs.Final(j.State) {
			break
		}
	}
	p.end()
	if !jobs.Final(j.State) {
		return j, fmt.Errorf("job %s: the progress stream ended (%v); it goes on on node %s", j.ID, sc.Err(), j.Node)
	}
	if j.State != jobs.Done {
		return j, errors.New(j.Error)
	}
	return j, nil
}

// relPaths shortens paths to their base names (the node's paths mean
// little here).
func relPaths(ps []string) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = filepath.Base(p)
	}
	return out
}
