package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"fusion/cluster"
	"fusion/dashboard"
	"fusion/engine/modelfile"
	"fusion/engine/runner"
	"fusion/hub"
	"fusion/internal/logfile"
	"fusion/internal/sdnotify"
	"fusion/jobs"
	"fusion/mcp/host"
	"fusion/node"
	"fusion/router"
	"fusion/router/admin"
	"fusion/router/cloud"
	"fusion/router/mcpchat"
	"fusion/router/openai"
	"fusion/router/openclaw"
)

const serveUsage = `usage: fusion serve [flags]

Starts a node: the engine over the models directory and the HTTP API
(OpenAI dialect: /v1/chat/completions, /v1/completions, /v1/models,
/tokenize, /detokenize, /health, /metrics). SIGTERM or Ctrl-C drains the
requests in flight (up to --drain-timeout) and exits 0.

Every flag can also be given as an environment variable FUSION_<NAME>
(--max-tokens is FUSION_MAX_TOKENS) and as a key of a JSON config file
(--config; max_tokens). A flag wins over the environment, which wins over
the file, which wins over the default.

`

// serveSetting is one setting of fusion serve: a flag, an environment
// variable and a config file key.
type serveSetting struct {
	name  string // flag name; FUSION_<NAME> and the file key derive from it
	def   func(s *serveSettings) string
	usage string
	apply func(s *serveSettings, v string) error
}

// serveSettings is what the settings resolve into.
type serveSettings struct {
	cfg       node.Config
	logLevel  slog.Level
	logFormat string
	// Inter-node gRPC TLS files (all three or none).
	tlsCert, tlsKey, tlsCA string
	// Files holding the admin key and the cluster secret.
	apiKeyFile, secretFile string
	// getenv resolves ${VAR} in the MCP config.
	getenv func(string) string
	// The log file's rotation (<data-dir>/logs/server.log).
	logMaxSizeMB, logMaxFiles int
}

func (s serveSetting) env() string {
	return "FUSION_" + strings.ToUpper(strings.ReplaceAll(s.name, "-", "_"))
}

func (s serveSetting) key() string { return strings.ReplaceAll(s.name, "-", "_") }

func constant(v string) func(*serveSettings) string { return func(*serveSettings) string { return v } }

// envOr is a default read from the environment variable name, else def.
func envOr(name, def string) func(*serveSettings) string {
	return func(s *serveSettings) string {
		if s.getenv != nil && s.getenv(name) != "" {
			return s.getenv(name)
		}
		return def
	}
}

// setHTTPURL sets *dst to v, an http(s) URL with a host.
func setHTTPURL(v string, dst *string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL", v)
	}
	*dst = v
	return nil
}

// serveSettingsTable lists the settings in the order they resolve
// (models-dir after data-dir, whose value its default needs).
func serveSettingsTable() []serveSetting {
	return []serveSetting{
		{"listen", constant(node.DefaultListen), "address to listen on (host:port; port 0 picks one)",
			func(s *serveSettings, v string) error { s.cfg.Listen = v; return nil }},
		{"data-dir", constant("~/.fusion"), "the node's data directory",
			func(s *serveSettings, v string) error { s.cfg.DataDir = expandHome(v); return nil }},
		{"models-dir", func(s *serveSettings) string { return filepath.Join(s.cfg.DataDir, "models") }, "models directory (default <data-dir>/models)",
			func(s *serveSettings, v string) error { s.cfg.ModelsDir = expandHome(v); return nil }},
		{"api-key", constant(""), "the admin API key, required on every route but /health (Authorization: Bearer KEY); sub-keys made with it open the routes of their scopes",
			func(s *serveSettings, v string) error { s.cfg.APIKey = v; return nil }},
		{"api-key-file", constant(""), "file holding the admin API key (instead of --api-key, which shows in the process list)",
			func(s *serveSettings, v string) error { s.apiKeyFile = expandHome(v); return nil }},
		{"insecure-no-auth", constant("false"), "serve without an API key on an address beyond loopback (anyone who reaches it can use and administer the node)",
			func(s *serveSettings, v string) error { return parseBool(v, &s.cfg.InsecureNoAuth) }},
		{"auth-failures", constant("20"), "failed API key attempts a client address may make per minute before it is answered 429 (-1: no limit)",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.AuthFailures, -1) }},
		{"max-subkeys", constant("10000"), "live sub-API keys at most (POST /admin/api/subkeys answers 409 beyond)",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.MaxSubKeys, 1) }},
		{"key-usage-interval", constant(node.DefaultKeyUsageInterval.String()), "how often a cluster member asks each peer for its sub-keys' usage: a key's rate limit holds cluster-wide within what the other nodes admit in this time",
			func(s *serveSettings, v string) error { return parseDuration(v, &s.cfg.KeyUsageInterval, false) }},
		{"preload", constant(""), "comma-separated models to load at start",
			func(s *serveSettings, v string) error { s.cfg.Preload = splitList(v); return nil }},
		{"max-body-bytes", constant(strconv.Itoa(router.DefaultMaxBodyBytes)), "largest request body accepted (413 above)",
			func(s *serveSettings, v string) error { return parseInt64(v, &s.cfg.MaxBodyBytes, 1) }},
		{"max-audio-bytes", constant(strconv.Itoa(openai.DefaultMaxAudioBytes)), "largest audio file /v1/audio/transcriptions and translations accept (400 above; --max-body-bytes applies first, with 413)",
			func(s *serveSettings, v string) error { return parseInt64(v, &s.cfg.MaxAudioBytes, 1) }},
		{"max-audio-seconds", constant(strconv.Itoa(openai.DefaultMaxAudioSeconds)), "longest audio, in seconds, /v1/audio/transcriptions and translations accept (400 above)",
			func(s *serveSettings, v string) error { return parseInt64(v, &s.cfg.MaxAudioSeconds, 1) }},
		{"max-speech-input", constant(strconv.Itoa(openai.DefaultMaxSpeechInput)), "longest input, in characters, /v1/audio/speech accepts (400 above)",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.MaxSpeechInput, 1) }},
		{"max-transcription-tokens", constant(strconv.Itoa(openai.DefaultMaxTranscriptionTokens)), "largest max_tokens /v1/audio/transcriptions and translations accept (400 above)",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.MaxTranscriptionTokens, 1) }},
		{"vad-model", constant(openai.DefaultVADModel), "the Silero VAD model (a model's name) that /v1/audio/transcriptions and translations use for vad_filter and batched (400 naming it when no node has it)",
			func(s *serveSettings, v string) error { s.cfg.VADModel = v; return nil }},
		{"max-image-side", constant(strconv.Itoa(openai.DefaultMaxImageSide)), "largest width or height /v1/images/* accept, in pixels (400 above; sides are multiples of 16)",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.MaxImageSide, 16) }},
		{"max-images", constant(strconv.Itoa(openai.DefaultMaxImages)), "largest n of one /v1/images/* request (400 above)",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.MaxImages, 1) }},
		{"max-image-steps", constant(strconv.Itoa(openai.DefaultMaxImageSteps)), "most denoising steps of one /v1/images/* request (400 above)",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.MaxImageSteps, 1) }},
		{"image-retention", constant(openai.DefaultImageRetention.String()), "how long /v1/images/files/{id} serves a url result, from the node that answered the request",
			func(s *serveSettings, v string) error { return parseDuration(v, &s.cfg.ImageRetention, false) }},
		{"max-tokens", constant("0"), "cap on max_tokens per request, and its default (0: none; a generation may take what the model's context window leaves after its prompt)",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.MaxTokens, 0) }},
		{"max-queued", constant("64"), "generations admitted at once before answering 429",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.MaxQueued, 1) }},
		{"max-running", constant(strconv.Itoa(runner.DefaultMaxRunning)), "sequences decoded together in the running batches",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.MaxRunning, 1) }},
		{"max-kv-bytes", constant("0"), "KV cache memory of running sequences (0: a quarter of RAM)",
			func(s *serveSettings, v string) error { return parseInt64(v, &s.cfg.MaxKVBytes, 0) }},
		{"step-tokens", constant(strconv.Itoa(runner.DefaultStepTokens)), "tokens per scheduler step (decode tokens plus prompt chunks)",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.StepTokens, 1) }},
		{"max-wait", constant(runner.DefaultMaxWait.String()), "starvation bound: a request waiting this long goes first at the next free slot",
			func(s *serveSettings, v string) error { return parseDuration(v, &s.cfg.MaxWait, false) }},
		{"memory-budget", constant("0"), "bytes of model weights kept loaded; idle models are evicted past it (0: half of RAM)",
			func(s *serveSettings, v string) error { return parseInt64(v, &s.cfg.MemoryBudget, 0) }},
		{"idle-ttl", constant("0s"), "unload an unpinned model unused for this long (0s: never)",
			func(s *serveSettings, v string) error { return parseDuration(v, &s.cfg.IdleTTL, true) }},
		{"max-tool-calls", constant("8"), "most tool calls in one answer when a tool call is forced and parallel calls are allowed",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.MaxToolCalls, 1) }},
		{"draft-tokens", constant(strconv.Itoa(runner.DefaultDraftTokens)), "tokens speculative decoding (backend_override rapid) proposes per step, 1-16; a model's num_draft_tokens setting wins",
			func(s *serveSettings, v string) error {
				if err := parseInt(v, &s.cfg.DraftTokens, 1); err != nil {
					return err
				}
				if s.cfg.DraftTokens > runner.MaxDraftTokens {
					return fmt.Errorf("%q is over %d", v, runner.MaxDraftTokens)
				}
				return nil
			}},
		{"max-embed-inputs", constant(strconv.Itoa(runner.DefaultMaxEmbedInputs)), "most inputs in one embeddings request (400 above)",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.MaxEmbeds, 1) }},
		{"max-rerank-documents", constant(strconv.Itoa(runner.DefaultMaxRerankDocuments)), "most documents in one rerank request (400 above)",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.MaxRerankDocs, 1) }},
		{"embed-batch-tokens", constant(strconv.Itoa(runner.DefaultEmbedBatchTokens)), "most padded tokens (inputs × the longest) in one embedding-model pass; waiting inputs of all requests are sorted by length and batched up to it",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.EmbedBatchTokens, 1) }},
		{"text-cache-models", constant(strconv.Itoa(runner.DefaultTextCacheModels)), "models whose tokenizer and chat template stay parsed, loaded or not (token counting, loading), least recently used out first",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.TextCacheModels, 1) }},
		{"threads", constant("0"), "CPU backend threads (0: all cores)",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.Threads, 0) }},
		{"backend", constant(runner.BackendAuto), "compute backend: auto (MLX when it loads and has a Metal GPU, else cpu), mlx or cpu; MLX that does not load falls back to cpu, /health says why",
			func(s *serveSettings, v string) error {
				if v != runner.BackendAuto && v != runner.BackendMLX && v != runner.BackendCPU {
					return fmt.Errorf("%q is not auto, mlx or cpu", v)
				}
				s.cfg.Backend = v
				return nil
			}},
		{"model-backends", constant(""), "per-model compute backend, comma-separated model=auto|mlx|cpu (overrides --backend for those models)",
			func(s *serveSettings, v string) error { return parseModelBackends(v, &s.cfg.ModelBackends) }},
		{"mlx-memory-limit", constant("0"), "MLX memory limit in bytes (0: MLX's default)",
			func(s *serveSettings, v string) error { return parseInt64(v, &s.cfg.MLXMemoryLimit, 0) }},
		{"mlx-cache-limit", constant("0"), "MLX buffer cache limit in bytes, at most --mlx-memory-limit (0: MLX's default)",
			func(s *serveSettings, v string) error { return parseInt64(v, &s.cfg.MLXCacheLimit, 0) }},
		{"drain-timeout", constant(node.DefaultDrainTimeout.String()), "how long shutdown waits for requests in flight",
			func(s *serveSettings, v string) error {
				d, err := time.ParseDuration(v)
				if err != nil || d <= 0 {
					return fmt.Errorf("%q is not a positive duration (e.g. 30s)", v)
				}
				s.cfg.DrainTimeout = d
				return nil
			}},
		{"otlp-endpoint", constant(""), "send OpenTelemetry traces here: grpc://host:port or a bare host:port (OTLP/gRPC), grpcs:// (over TLS), http(s)://host:port[/path] (OTLP/HTTP); off when empty",
			func(s *serveSettings, v string) error {
				if v != "" && !strings.Contains(v, "://") && !strings.Contains(v, ":") {
					return fmt.Errorf("%q is not an OTLP endpoint (e.g. grpc://collector:4317)", v)
				}
				s.cfg.Tracing.Endpoint = v
				return nil
			}},
		{"otlp-sample-ratio", constant("1"), "share of new traces recorded, in (0, 1] (a trace a client started follows its decision)",
			func(s *serveSettings, v string) error {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil || f <= 0 || f > 1 {
					return fmt.Errorf("%q is not a ratio in (0, 1]", v)
				}
				s.cfg.Tracing.SampleRatio = f
				return nil
			}},
		{"tls-cert", constant(""), "PEM certificate of the HTTPS frontend (with --tls-key; HTTP/2 too); reloaded on SIGHUP and when the file changes",
			func(s *serveSettings, v string) error { s.cfg.TLSCertFile = expandHome(v); return nil }},
		{"tls-key", constant(""), "PEM private key of --tls-cert",
			func(s *serveSettings, v string) error { s.cfg.TLSKeyFile = expandHome(v); return nil }},
		{"tls-watch-interval", constant(node.DefaultTLSWatch.String()), "how often the HTTPS certificate files are checked for a change (0: only on SIGHUP)",
			func(s *serveSettings, v string) error {
				d, err := time.ParseDuration(v)
				if err != nil || d < 0 {
					return fmt.Errorf("%q is not a duration (e.g. 10s, or 0 for SIGHUP only)", v)
				}
				if d == 0 {
					d = -1 // node.Config: negative is off
				}
				s.cfg.TLSWatchInterval = d
				return nil
			}},
		{"cache-hot-bytes", constant("0"), "prefix cache RAM tier cap in bytes (0: 10% of RAM; -1: off)",
			func(s *serveSettings, v string) error { return parseInt64(v, &s.cfg.CacheHotBytes, -1) }},
		{"cache-ssd-bytes", constant(strconv.FormatInt(runner.DefaultCacheSSDBytes, 10)), "prefix cache SSD tier cap in bytes, under <data-dir>/cache (-1: off)",
			func(s *serveSettings, v string) error { return parseInt64(v, &s.cfg.CacheSSDBytes, -1) }},
		{"cache-write-queue", constant("64"), "prefix cache blocks waiting to be written to the SSD before new ones are dropped",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.CacheWriteQueue, 1) }},
		{"cache-state-every", constant(strconv.Itoa(runner.DefaultCacheStateEvery)), "prefix cache: blocks between the recurrent-state snapshots of models with Gated DeltaNet layers (a restore ends on one)",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.CacheStateEvery, 1) }},
		{"completions-as-chat", constant(""), "comma-separated models whose /v1/completions prompts are rendered as a chat",
			func(s *serveSettings, v string) error {
				s.cfg.CompletionsAsChat = map[string]bool{}
				for _, m := range splitList(v) {
					s.cfg.CompletionsAsChat[m] = true
				}
				return nil
			}},
		{"session-ttl", constant(openclaw.DefaultTTL.String()), "OpenClaw agent sessions expire this long after their last access",
			func(s *serveSettings, v string) error { return parseDuration(v, &s.cfg.OpenClaw.TTL, false) }},
		{"session-cap", constant(strconv.Itoa(openclaw.DefaultCap)), "OpenClaw agent sessions at most (the least recently used idle one is evicted)",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.OpenClaw.Cap, 1) }},
		{"session-heartbeat", constant(openclaw.DefaultHeartbeat.String()), "interval of the OpenClaw event stream's heartbeat",
			func(s *serveSettings, v string) error { return parseDuration(v, &s.cfg.OpenClaw.Heartbeat, false) }},
		{"session-max-history-bytes", constant(strconv.Itoa(openclaw.DefaultMaxHistory)), "largest history an OpenClaw agent session may hold",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.OpenClaw.MaxHistoryBytes, 1) }},
		{"mcp-config", constant(""), "JSON file of MCP servers in Claude Desktop's format ({\"mcpServers\": {...}}; ${VAR} is replaced from the environment)",
			func(s *serveSettings, v string) error {
				if v == "" {
					s.cfg.MCPServers = host.Config{}
					return nil
				}
				cfg, err := host.LoadConfig(expandHome(v), s.getenv)
				s.cfg.MCPServers = cfg
				return err
			}},
		{"cloud-config", constant(""), "JSON file of cloud upstreams for backend_override \"cloud\" and cloud_fallback ({\"upstreams\": [...]}, see the README; keys are named by api_key_env or api_key_file, never written in it); PUT /admin/api/cloud replaces it for the cluster",
			func(s *serveSettings, v string) error {
				s.cfg.Cloud = cloud.Config{}
				if v == "" {
					return nil
				}
				doc, err := os.ReadFile(expandHome(v))
				if err != nil {
					return err
				}
				s.cfg.Cloud, err = cloud.Parse(doc)
				return err
			}},
		{"mcp-call-timeout", constant(host.DefaultCallTimeout.String()), "longest an MCP tool call may take before it fails with 504",
			func(s *serveSettings, v string) error { return parseDuration(v, &s.cfg.MCP.CallTimeout, false) }},
		{"mcp-config-max-bytes", constant(strconv.Itoa(admin.DefaultMaxMCPConfigBytes)), "largest MCP configuration PUT /admin/api/mcp/servers takes (the cluster keeps it in Raft, which takes at most the default)",
			func(s *serveSettings, v string) error {
				if err := parseInt(v, &s.cfg.MCPMaxConfigBytes, 1); err != nil {
					return err
				}
				if s.cfg.MCPMaxConfigBytes > admin.DefaultMaxMCPConfigBytes {
					return fmt.Errorf("at most %d", admin.DefaultMaxMCPConfigBytes)
				}
				return nil
			}},
		{"mcp-max-steps", constant(strconv.Itoa(mcpchat.DefaultMaxSteps)), "model turns a chat request with MCP tools may take (the server runs the calls between them)",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.MCPMaxSteps, 1) }},
		{"hf-endpoint", envOr("HF_ENDPOINT", hub.DefaultEndpoint),
			"the Hugging Face Hub that /admin/api/hf/* and model downloads use (default $HF_ENDPOINT, else " + hub.DefaultEndpoint + ")",
			func(s *serveSettings, v string) error { return setHTTPURL(v, &s.cfg.HF.Endpoint) }},
		{"hf-token", constant(""), "Hugging Face token sent to the Hub for gated and private repos (default $HF_TOKEN)",
			func(s *serveSettings, v string) error {
				s.cfg.HF.Token = v
				if v == "" && s.getenv != nil {
					s.cfg.HF.Token = s.getenv("HF_TOKEN")
				}
				return nil
			}},
		{"modelscope-endpoint", envOr("MODELSCOPE_ENDPOINT", hub.DefaultModelScopeEndpoint),
			"the ModelScope that /admin/api/hf/* with source=modelscope uses (default $MODELSCOPE_ENDPOINT, else " + hub.DefaultModelScopeEndpoint + ")",
			func(s *serveSettings, v string) error { return setHTTPURL(v, &s.cfg.HF.ModelScopeEndpoint) }},
		{"modelscope-token", constant(""), "ModelScope access token for private repos (default $MODELSCOPE_API_TOKEN)",
			func(s *serveSettings, v string) error {
				s.cfg.HF.ModelScopeToken = v
				if v == "" && s.getenv != nil {
					s.cfg.HF.ModelScopeToken = s.getenv("MODELSCOPE_API_TOKEN")
				}
				return nil
			}},
		{"min-free-disk", constant(strconv.FormatInt(node.DefaultMinFreeDisk, 10)), "bytes a model download must leave free on the models directory's disk; a download that would not is refused before it starts",
			func(s *serveSettings, v string) error { return parseInt64(v, &s.cfg.HF.MinFreeDisk, 0) }},
		{"download-parts", constant(strconv.Itoa(hub.DefaultParts)), "ranged requests that fetch one large file of a model download at once (from the Hub, its CDN or Xet's CAS bridge, or ModelScope); 1 = one stream a file",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.HF.Parts, 1) }},
		{"download-min-part", constant(strconv.FormatInt(hub.DefaultMinPart, 10)), "bytes of one ranged part at least: a file below twice this is fetched in one stream",
			func(s *serveSettings, v string) error { return parseInt64(v, &s.cfg.HF.MinPart, 1) }},
		{"download-parallel", constant("4"), "files of one model download fetched at once",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.HF.Parallel, 1) }},
		{"download-resumes", constant(strconv.Itoa(node.DefaultDownloadResumes)), "times in a row a model download that a stop or restart of the node interrupted is started again when the node starts (0 = never: it resumes when asked again)",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.HF.Resumes, 0) }},
		{"hf-cache", func(s *serveSettings) string { return modelfile.HFCacheDir(s.getenv) },
			"Hugging Face cache directory whose complete snapshots are served as models ORG/NAME (read only; a download of a repo complete in it is answered from it); \"\" = none; the default follows huggingface_hub: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub",
			func(s *serveSettings, v string) error { s.cfg.HFCache = expandHome(v); return nil }},
		{"max-jobs", constant(strconv.Itoa(jobs.DefaultMaxRunning)), "background jobs (downloads) running at once on this node; more are answered 429",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.Jobs.MaxRunning, 1) }},
		{"bench-max-prompt", constant(strconv.Itoa(admin.MaxBenchPrompt)), "tokens of one prompt a benchmark (/admin/api/bench/run) may ask for",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.Bench.MaxPrompt, 1) }},
		{"bench-max-generate", constant(strconv.Itoa(admin.MaxBenchGenerate)), "tokens per stream a benchmark may ask to generate",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.Bench.MaxGenerate, 1) }},
		{"bench-max-streams", constant(strconv.Itoa(admin.MaxBenchStreams)), "streams at once (concurrency) a benchmark may ask for",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.Bench.MaxStreams, 1) }},
		{"bench-max-points", constant(strconv.Itoa(admin.MaxBenchGrid)), "points a benchmark may ask for in all (prompt lengths × concurrency levels × generation lengths); the default's result fits a job record and a profile",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.Bench.MaxPoints, 1) }},
		{"bench-max-questions", constant(strconv.Itoa(admin.MaxAccuracyQuestions)), "multiple-choice questions an accuracy benchmark (/admin/api/bench/accuracy) may carry",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.Bench.MaxQuestions, 1) }},
		{"bench-max-question-bytes", constant(strconv.Itoa(admin.MaxAccuracyQuestionBytes)), "bytes of the texts (questions, options, topics) of an accuracy benchmark's questions",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.Bench.MaxQuestionBytes, 1) }},
		{"panel-session-ttl", constant(dashboard.DefaultSessionTTL.String()), "how long a sign-in to the admin panel (/admin/) lasts",
			func(s *serveSettings, v string) error { return parseDuration(v, &s.cfg.Panel.SessionTTL, false) }},
		{"panel-max-sessions", constant(strconv.Itoa(dashboard.DefaultMaxSessions)), "admin panel sign-ins kept at most, by the node or, in a cluster, by the whole cluster (past it the one that expires first ends)",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.Panel.MaxSessions, 1) }},
		{"panel-cookie-domain", constant(""), "Domain of the admin panel's session cookie (e.g. lan.example), so a sign-in on one member's panel reaches the members on other hosts under it (default: the host that signed in)",
			func(s *serveSettings, v string) error {
				if v == "" {
					return nil
				}
				s.cfg.Panel.CookieDomain = v
				return dashboard.CheckCookieDomain(v)
			}},
		{"node-id", constant(""), "this node's id in the cluster (default: the hostname)",
			func(s *serveSettings, v string) error { s.cfg.Cluster.NodeID = v; return nil }},
		{"join", constant(""), "comma-separated gossip addresses (host:port) of cluster members to join",
			func(s *serveSettings, v string) error { s.cfg.Cluster.Join = splitList(v); return nil }},
		{"cluster-listen", constant(""), "gossip address (host:port, TCP+UDP); raft uses port+1 and gRPC port+2 unless set (default " + node.DefaultClusterListen + " when clustered)",
			func(s *serveSettings, v string) error { s.cfg.Cluster.Listen = v; return nil }},
		{"cluster-advertise", constant(""), "address other nodes reach this one on (host or host:port)",
			func(s *serveSettings, v string) error { s.cfg.Cluster.Advertise = v; return nil }},
		{"raft-listen", constant(""), "raft address (host:port; default: cluster-listen port+1)",
			func(s *serveSettings, v string) error { s.cfg.Cluster.RaftListen = v; return nil }},
		{"grpc-listen", constant(""), "inter-node gRPC address (host:port; default: cluster-listen port+2)",
			func(s *serveSettings, v string) error { s.cfg.Cluster.GRPCListen = v; return nil }},
		{"bootstrap-expect", constant("0"), "form a new cluster once this many nodes (all given the same number) are up",
			func(s *serveSettings, v string) error { return parseInt(v, &s.cfg.Cluster.BootstrapExpect, 0) }},
		{"voters", constant("3"), "raft voters the cluster keeps, 3 or 5 (the leader's setting counts; other members are non-voters)",
			func(s *serveSettings, v string) error {
				if v != "3" && v != "5" {
					return fmt.Errorf("%q: a cluster keeps 3 or 5 voters", v)
				}
				s.cfg.Cluster.Voters, _ = strconv.Atoi(v)
				return nil
			}},
		{"cluster-rtt-publish-interval", constant(cluster.DefaultRTTPublishInterval.String()), "least time between two publications of this node's measured round trips to its peers (through the Raft log, for the shard planner)",
			func(s *serveSettings, v string) error {
				return parseDuration(v, &s.cfg.Cluster.RTT.PublishInterval, false)
			}},
		{"cluster-rtt-publish-change", constant(strconv.Itoa(int(cluster.DefaultRTTPublishChange * 100))), "percent a peer's round trip must move by (and by --cluster-rtt-publish-min) to be published again",
			func(s *serveSettings, v string) error {
				var pct int
				if err := parseInt(v, &pct, 1); err != nil {
					return err
				}
				s.cfg.Cluster.RTT.PublishChange = float64(pct) / 100
				return nil
			}},
		{"cluster-rtt-publish-min", constant(cluster.DefaultRTTPublishMin.String()), "least move of a peer's round trip that is published again (with --cluster-rtt-publish-change)",
			func(s *serveSettings, v string) error { return parseDuration(v, &s.cfg.Cluster.RTT.PublishMin, false) }},
		{"cluster-rtt-unknown", constant(cluster.DefaultUnknownRTT.String()), "round trip the shard planner counts for a hop between two nodes that have measured none (the leader's setting counts)",
			func(s *serveSettings, v string) error { return parseDuration(v, &s.cfg.Cluster.RTT.Unknown, false) }},
		{"cluster-secret", constant(""), "shared secret: encrypts gossip and authenticates raft and gRPC between nodes (fusion cluster secret makes one)",
			func(s *serveSettings, v string) error { s.cfg.Cluster.Secret = v; return nil }},
		{"cluster-secret-file", constant(""), "file holding the cluster secret (instead of --cluster-secret)",
			func(s *serveSettings, v string) error { s.secretFile = expandHome(v); return nil }},
		{"cluster-secret-previous", constant(""), "a second secret also accepted from other nodes, for a rotation without downtime (see the README)",
			func(s *serveSettings, v string) error { s.cfg.Cluster.SecretAccept = splitList(v); return nil }},
		{"insecure-cluster", constant("false"), "let gossip, raft and gRPC listen beyond loopback without a cluster secret (anyone reaching those ports can join and write)",
			func(s *serveSettings, v string) error { return parseBool(v, &s.cfg.Cluster.Insecure) }},
		{"grpc-tls-cert", constant(""), "PEM certificate this node presents on inter-node gRPC (mutual TLS; with --grpc-tls-key and --grpc-tls-ca)",
			func(s *serveSettings, v string) error { s.tlsCert = expandHome(v); return nil }},
		{"grpc-tls-key", constant(""), "PEM private key of --grpc-tls-cert",
			func(s *serveSettings, v string) error { s.tlsKey = expandHome(v); return nil }},
		{"grpc-tls-ca", constant(""), "PEM CA certificate every member's gRPC certificate must be signed by",
			func(s *serveSettings, v string) error { s.tlsCA = expandHome(v); return nil }},
		{"log-level", constant("info"), "debug, info, warn or error",
			func(s *serveSettings, v string) error { return s.logLevel.UnmarshalText([]byte(v)) }},
		{"log-max-size-mb", constant(strconv.Itoa(logfile.DefaultMaxSizeMB)), "rotate <data-dir>/logs/server.log past this many megabytes",
			func(s *serveSettings, v string) error { return parseInt(v, &s.logMaxSizeMB, 1) }},
		{"log-max-files", constant(strconv.Itoa(logfile.DefaultMaxFiles)), "rotated log files kept",
			func(s *serveSettings, v string) error { return parseInt(v, &s.logMaxFiles, 1) }},
		{"log-format", constant("text"), "text or json",
			func(s *serveSettings, v string) error {
				if v != "text" && v != "json" {
					return fmt.Errorf("%q is not text or json", v)
				}
				s.logFormat = v
				return nil
			}},
	}
}

// resolveServe parses the flags, the environment (getenv) and the config
// file into settings.
func resolveServe(args []string, getenv func(string) string, stderr io.Writer) (*serveSettings, error) {
	table := serveSettingsTable()
	fs := newFlagSet("serve", stderr)
	flags := make(map[string]*string, len(table))
	for _, s := range table {
		where := "env " + s.env()
		if d := s.def(&serveSettings{}); d != "" && s.name != "models-dir" {
			where = "default " + d + "; " + where
		}
		flags[s.name] = fs.String(s.name, "", fmt.Sprintf("%s (%s)", s.usage, where))
	}
	config := fs.String("config", "", "JSON config file whose keys are the flag names with '_' for '-' (env FUSION_CONFIG)")
	fs.Usage = func() { fmt.Fprint(stderr, serveUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, usagef("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })

	path := *config
	if !given["config"] {
		path = getenv("FUSION_CONFIG")
	}
	file := map[string]string{}
	if path != "" {
		var err error
		if file, err = readServeConfig(expandHome(path), table); err != nil {
			return nil, err
		}
	}

	s := &serveSettings{logLevel: slog.LevelInfo, logFormat: "text", getenv: getenv}
	for _, st := range table {
		v, from := st.def(s), "default"
		if fv, ok := file[st.key()]; ok {
			v, from = fv, "config file key "+st.key()
		}
		if ev, ok := lookupEnv(getenv, st.env()); ok {
			v, from = ev, "environment variable "+st.env()
		}
		if given[st.name] {
			v, from = *flags[st.name], "flag --"+st.name
		}
		if err := st.apply(s, v); err != nil {
			return nil, usagef("%s: %v", from, err)
		}
		s.cfg.Effective = append(s.cfg.Effective, effective(st, v, from))
	}
	if (s.cfg.TLSCertFile == "") != (s.cfg.TLSKeyFile == "") {
		return nil, usagef("--tls-cert and --tls-key go together")
	}
	s.cfg.CheckSetting = checkServeSetting
	if c := s.cfg; c.MLXMemoryLimit > 0 && c.MLXCacheLimit > c.MLXMemoryLimit {
		return nil, usagef("--mlx-cache-limit %d is over --mlx-memory-limit %d", c.MLXCacheLimit, c.MLXMemoryLimit)
	}
	if err := readSecretFile(s.apiKeyFile, "--api-key", &s.cfg.APIKey); err != nil {
		return nil, err
	}
	if err := readSecretFile(s.secretFile, "--cluster-secret", &s.cfg.Cluster.Secret); err != nil {
		return nil, err
	}
	if s.tlsCert != "" || s.tlsKey != "" || s.tlsCA != "" {
		if s.tlsCert == "" || s.tlsKey == "" || s.tlsCA == "" {
			return nil, usagef("--grpc-tls-cert, --grpc-tls-key and --grpc-tls-ca go together")
		}
		server, client, err := cluster.LoadTLS(s.tlsCert, s.tlsKey, s.tlsCA)
		if err != nil {
			return nil, usagef("%v", err)
		}
		s.cfg.Cluster.ServerTLS, s.cfg.Cluster.ClientTLS = server, client
	}
	return s, nil
}

// secretSettings are the settings whose values are credentials: nothing
// that shows the configuration (logs, /admin/api/global-settings) may
// print their values.
var secretSettings = map[string]bool{"api-key": true, "cluster-secret": true, "cluster-secret-previous": true, "hf-token": true, "modelscope-token": true}

// isSecretSetting reports whether the setting called name holds a
// credential.
func isSecretSetting(name string) bool { return secretSettings[name] }

// readSecretFile reads a secret from path (surrounding white space
// trimmed) into dst, which the flag named by other must not also set.
func readSecretFile(path, other string, dst *string) error {
	if path == "" {
		return nil
	}
	if *dst != "" {
		return usagef("%s and %s-file go together badly: give one", other, other)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return usagef("%s-file: %v", other, err)
	}
	if *dst = strings.TrimSpace(string(b)); *dst == "" {
		return usagef("%s-file: %s is empty", other, path)
	}
	return nil
}

func parseBool(v string, dst *bool) error {
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("%q is not true or false", v)
	}
	*dst = b
	return nil
}

// effective is one resolved setting for GET /admin/api/global-settings:
// its value (a secret's as set/unset) and where it came from.
func effective(st serveSetting, v, from string) admin.GlobalSetting {
	source, _, _ := strings.Cut(from, " ")
	switch source {
	case "config":
		source = "file"
	case "environment":
		source = "env"
	}
	if secretSettings[st.name] {
		v = "unset"
		if from != "default" {
			v = "set"
		}
	}
	return admin.GlobalSetting{Key: st.key(), Value: v, Source: source}
}

// checkServeSetting validates a value for the setting whose file key is
// key, as its flag would.
func checkServeSetting(key, value string) error {
	for _, st := range serveSettingsTable() {
		if st.key() == key {
			return st.apply(&serveSettings{}, value)
		}
	}
	return fmt.Errorf("unknown setting")
}

// lookupEnv treats an unset and an empty variable alike.
func lookupEnv(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

// readServeConfig reads a JSON object of settings. Lists may be arrays or
// comma-separated strings; completions_as_chat may also be an object of
// model → bool, model_backends one of model → backend. Unknown keys are an error, so typos do not pass silently.
func readServeConfig(path string, table []serveSetting) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	known := map[string]bool{}
	for _, s := range table {
		known[s.key()] = true
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		if !known[k] {
			keys := make([]string, 0, len(known))
			for k := range known {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			return nil, fmt.Errorf("config %s: unknown key %q (known: %s)", path, k, strings.Join(keys, ", "))
		}
		s, err := configValue(v)
		if err != nil {
			return nil, fmt.Errorf("config %s: %s: %w", path, k, err)
		}
		out[k] = s
	}
	return out, nil
}

// configValue turns a JSON value into the string a flag would carry.
func configValue(v json.RawMessage) (string, error) {
	var x any
	if err := json.Unmarshal(v, &x); err != nil {
		return "", err
	}
	switch t := x.(type) {
	case string:
		return t, nil
	case float64, bool:
		return strings.TrimSpace(string(v)), nil
	case []any:
		parts := make([]string, len(t))
		for i, e := range t {
			s, ok := e.(string)
			if !ok {
				return "", fmt.Errorf("list item %d is not a string", i)
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	case map[string]any:
		var on []string
		for k, e := range t {
			switch b := e.(type) {
			case bool:
				if b {
					on = append(on, k)
				}
			case string: // model_backends: {"model": "mlx"}
				on = append(on, k+"="+b)
			default:
				return "", fmt.Errorf("value of %q is not a boolean or a string", k)
			}
		}
		sort.Strings(on)
		return strings.Join(on, ","), nil
	}
	return "", fmt.Errorf("unsupported value %s", v)
}

// parseModelBackends parses model=backend pairs.
func parseModelBackends(v string, dst *map[string]string) error {
	out := map[string]string{}
	for _, p := range splitList(v) {
		model, be, ok := strings.Cut(p, "=")
		model, be = strings.TrimSpace(model), strings.TrimSpace(be)
		if !ok || model == "" {
			return fmt.Errorf("%q is not model=backend", p)
		}
		if be != runner.BackendAuto && be != runner.BackendMLX && be != runner.BackendCPU {
			return fmt.Errorf("%s: %q is not auto, mlx or cpu", model, be)
		}
		out[model] = be
	}
	*dst = out
	return nil
}

func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func parseInt(v string, dst *int, minimum int) error {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < minimum {
		return fmt.Errorf("%q is not an integer >= %d", v, minimum)
	}
	*dst = n
	return nil
}

func parseInt64(v string, dst *int64, minimum int64) error {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < minimum {
		return fmt.Errorf("%q is not an integer >= %d", v, minimum)
	}
	*dst = n
	return nil
}

// parseDuration parses a positive duration (or zero when allowed).
func parseDuration(v string, dst *time.Duration, allowZero bool) error {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 || (d == 0 && !allowZero) {
		return fmt.Errorf("%q is not a positive duration (e.g. 30s)", v)
	}
	*dst = d
	return nil
}

// expandHome replaces a leading ~ with the home directory.
func expandHome(p string) string {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return p
	}
	return filepath.Join(home, strings.TrimPrefix(p, "~"))
}

// applyOverrides puts in force the cluster's replicated overrides (as
// node.StoredGlobalOverrides kept them) of the settings this node left at
// their defaults: its own flags, environment and config file win. The
// data dir, where the overrides are kept, and secrets are never taken. It
// returns the keys applied and, for each override refused by the flag's
// parser (a newer build may check more), why.
func (s *serveSettings) applyOverrides(over map[string]string) (applied, refused []string) {
	table := serveSettingsTable()
	for i, row := range s.cfg.Effective {
		v, ok := over[row.Key]
		if !ok || row.Source != "default" || row.Key == "data_dir" {
			continue
		}
		for _, st := range table {
			if st.key() != row.Key || secretSettings[st.name] {
				continue
			}
			if err := st.apply(s, v); err != nil {
				refused = append(refused, fmt.Sprintf("%s=%q: %v", row.Key, v, err))
				continue
			}
			s.cfg.Effective[i] = effective(st, v, "cluster")
			applied = append(applied, row.Key)
		}
	}
	return applied, refused
}

func runServe(ctx context.Context, args []string, _, stderr io.Writer) error {
	s, err := resolveServe(args, os.Getenv, stderr)
	if err != nil {
		return err
	}
	over, err := node.StoredGlobalOverrides(s.cfg.DataDir)
	if err != nil {
		return err
	}
	overridden, refused := s.applyOverrides(over)
	level := new(slog.LevelVar)
	level.Set(s.logLevel)
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(stderr, opts)
	if s.logFormat == "json" {
		h = slog.NewJSONHandler(stderr, opts)
	}
	// The log file is JSON whatever the console's format, so the admin
	// API can filter it by level.
	logs, err := logfile.Open(filepath.Join(s.cfg.DataDir, "logs"), logfile.Options{MaxSizeMB: s.logMaxSizeMB, MaxFiles: s.logMaxFiles})
	if err != nil {
		return err
	}
	defer logs.Close()
	s.cfg.Logger = slog.New(slog.NewMultiHandler(h, slog.NewJSONHandler(logs, opts)))
	s.cfg.LogLevel, s.cfg.Logs = level, logs
	s.cfg.Version = version
	if len(overridden) > 0 {
		s.cfg.Logger.Info("cluster settings in force from the last run", "keys", overridden)
	}
	for _, r := range refused {
		s.cfg.Logger.Warn("cluster setting not taken; this node keeps its default", "setting", r)
	}
	n, err := node.New(s.cfg)
	if err != nil {
		return err
	}
	// SIGHUP reloads the HTTPS certificate (as nginx and others do after a
	// renewal); the watcher also notices changed files on its own.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	hupCtx, stopHup := context.WithCancel(ctx)
	defer stopHup()
	go func() {
		for {
			select {
			case <-hupCtx.Done():
				return
			case <-hup:
				if err := n.ReloadTLS(); err != nil {
					s.cfg.Logger.Error("SIGHUP: certificate not reloaded; still serving the previous one", "err", err)
				} else {
					s.cfg.Logger.Info("SIGHUP: certificate checked")
				}
			}
		}
	}()
	// Under systemd (Type=notify): READY=1 once serving, WATCHDOG=1 while
	// the node's own /health answers, STOPPING=1 when the drain starts.
	notifier, err := sdnotify.FromEnv(os.Getenv, os.Getpid())
	if err != nil {
		s.cfg.Logger.Warn("not talking to the service manager", "err", err)
	}
	n.Start()
	fmt.Fprintf(stderr, "fusion %s serving on %s (models: %s)\n", version, n.URL(), s.cfg.ModelsDir)
	if err := notifier.Notify("READY=1\nSTATUS=serving on " + n.URL()); err != nil {
		s.cfg.Logger.Warn("service manager not told we are ready", "err", err)
	}
	wdCtx, stopWD := context.WithCancel(ctx)
	wdDone := make(chan struct{})
	go func() {
		defer close(wdDone)
		notifier.RunWatchdog(wdCtx, n.CheckHealth, func(err error) {
			s.cfg.Logger.Warn("watchdog not answered: the node does not serve its own /health", "err", err)
		})
	}()
	<-ctx.Done()
	stopWD()
	<-wdDone
	_ = notifier.Notify("STOPPING=1\nSTATUS=draining")
	return n.Stop(context.WithoutCancel(ctx))
}
