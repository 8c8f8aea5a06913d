# fusion — build, run, test, bench.
GO        ?= go
BIN       := bin/fusion
DATA_DIR  ?= $(HOME)/.fusion
MODELS_DIR ?= $(DATA_DIR)/models
VENV      := $(CURDIR)/.cache/venv
FIXTURES  := $(CURDIR)/.cache/fixtures
# Tests that compare against reference implementations find them here and
# fail (rather than skip) when FUSION_REQUIRE_FIXTURES=1; the MLX tests
# (engine/backend/mlx) fail rather than skip without libmlxc when
# FUSION_REQUIRE_MLX=1.
TEST_ENV  := FUSION_FIXTURES=$(FIXTURES) FUSION_PYTHON=$(VENV)/bin/python FUSION_REQUIRE_FIXTURES=1 FUSION_REQUIRE_MLX=1
FUZZTIME  ?= 60s

SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: build build-mlx build-darwin run test test-deps bench soak fuzz vet clean

build:
	$(GO) build -o $(BIN) ./cmd/fusion

# libmlxc (mlx-c) from ../shared/vendor against the venv's mlx-cpu wheel,
# cached in ~/.cache/fusion/mlxc/<tarball sha256>-mlx<version>-<os>-<arch>;
# prints that directory.
build-mlx:
	@[ -x $(VENV)/bin/python ] || ./scripts/test-deps.sh
	@FUSION_PYTHON=$(VENV)/bin/python ./scripts/mlxc.sh

# The Mac binary (darwin/arm64, cgo) cross-built here with zig; see
# scripts/darwin-build.sh for what it checks and how it links.
build-darwin:
	@[ -x $(VENV)/bin/python ] || ./scripts/test-deps.sh
	@FUSION_PYTHON=$(VENV)/bin/python ./scripts/darwin-build.sh bin/fusion-darwin-arm64

run: build
	@./scripts/run.sh "$(BIN)" "$(DATA_DIR)" "$(MODELS_DIR)"

test-deps:
	@./scripts/test-deps.sh

# go test's JSON goes to .cache/test.json; testsum prints what go test
# prints without -v (package results, the full output of failures) plus
# every skipped test with its reason, and fails when anything failed.
test: test-deps
	@# -trimpath: vet compiles every package for its export data, and so
	@# fills the build cache for deploy's TestHomebrewFormula (the
	@# formula's go build is -trimpath) and cmd/fusion's test builds
	@# (-trimpath too), which then compile only their main package.
	$(GO) vet -trimpath ./...
	FUSION_PYTHON=$(VENV)/bin/python ./scripts/darwin-build.sh
	$(GO) build -o .cache/testsum ./internal/testsum
	@# ./... with the slowest packages first (scripts/testpkgs.sh).
	pkgs=$$(GO=$(GO) ./scripts/testpkgs.sh) && \
	$(TEST_ENV) $(GO) test -race -count=1 -timeout 40m -json $$pkgs | .cache/testsum -log .cache/test.json
	@# The HTTP suites (OpenAI, Anthropic, OpenClaw, tools, router) and the
	@# schema suite again, every test node's models on MLX (issue 16);
	@# nodetest fails a node that did not get MLX. The transcription suites
	@# (the SDK's, and vad_filter/batched against faster-whisper) run in the
	@# main pass only: Whisper on MLX is engine/whisper's TestTranscribeOnMLX. (Run one after another, not side by side: three
	@# race-enabled runs on two cores made the MLX pass's cluster tests
	@# miss their deadlines.)
	FUSION_TEST_BACKEND=mlx $(TEST_ENV) $(GO) test -race -count=1 -timeout 30m -json -skip '^(TestPythonSDKTranscriptions|TestPythonSDKSpeech|TestTranscriptionVADFilter)$$' ./router ./router/openai ./router/anthropic ./router/openclaw | .cache/testsum -log .cache/test-mlx.json
	FUSION_TEST_BACKEND=mlx $(TEST_ENV) $(GO) test -race -count=1 -timeout 30m -run 'TestSchemaSuite' ./engine/runner
	@# Issue #5's suite at full size, printing its counts: 200 answers +
	@# 200 forced calls, and speculatively 100 + 100 by prompt lookup and
	@# 33 + 33 by a draft model. The main (race) pass runs the first of
	@# these same requests (33 + 33, and 14 + 14 for each way of drafting):
	@# enough for the race detector, each check once at full size here.
	$(TEST_ENV) $(GO) test -count=1 -timeout 30m -run 'TestSchemaSuite' -v ./engine/runner | grep -E 'valid|^(ok|FAIL|--- )'
	@# Issue #24's TTS round trip (20 sentences spoken by the real Piper
	@# voice, transcribed by our Whisper tiny.en, WER at most 10%) and the
	@# speech bench's smoke run against piper-tts. Without -race (~30 s and
	@# ~8 s here; the main pass skips both: minutes and ~22 s under -race).
	@# Beside them, the big mlx-lm parity suites (the dense families with
	@# Qwen3's 151,936-token vocabulary, Gemma 3 with its 262,208):
	@# single-goroutine work the race pass skips (~320 s there, ~130 CPU-s
	@# here, mlx-lm's share included), and Gemma 4's tokenizer built from
	@# its 262,144-token GGUF vocabulary (63 s under -race, 34 s without),
	@# the SDK suites on gemma3 and qwen3_5_moe (minutes under -race), and
	@# llama.cpp loading our GGUF outputs (dense and a qwen3moe mixture's)
	@# and llama-bench's smoke run (101 s and 48 s under -race before the
	@# mixture, which adds ~35 CPU-s), and the MoE bench's smoke run (a tiny
	@# mixture with that vocabulary through the engine, mlx-lm and
	@# llama-bench: ~20 CPU-s). Likewise llama.cpp on our gpt-oss GGUF
	@# and that file served with its harmony format (its 201,088-token
	@# vocabulary rebuilt from GGUF metadata: ~350 s under -race on a loaded
	@# machine, 22 s without), and the equal-size mixed-precision test
	@# (numerical only: 100 s under -race, 13 s without).
	FUSION_TTS_ROUNDTRIP=1 $(TEST_ENV) $(GO) test -count=1 -timeout 20m -run '^(TestRoundTripWER|TestBenchSpeechSmoke|TestParityMLX|TestParityMLXGemma3|TestTokenizerGemma4|TestPythonSDKFamilies|TestLlamaCppRunsOurGGUF|TestLlamaBenchSmoke|TestBenchMoESmoke|TestLlamaCppRunsOurGptOssGGUF|TestHarmonyServedGGUF|TestMixedBeatsUniformEqualSize|TestGemma4ForcedAndThinking)$$' -v ./engine/piper ./internal/bench ./engine/model ./engine/gguf ./router/openai ./engine/quant ./engine/runner | grep -E 'WER [0-9]|audio-s/s|[0-9]+ passed|^(ok|FAIL|--- )'

# The JSON document is the only thing on stdout; building and installing
# talk on stderr.
bench:
	@$(MAKE) --no-print-directory -s build test-deps >&2
	@$(TEST_ENV) ./scripts/bench.sh

# The soak (not in make test): 3 fusion processes under mixed chat, agent
# and embedding load, a node drained and restarted every 5 minutes, for
# SOAK_DURATION (default 30m; e.g. make soak SOAK_DURATION=5m); RSS and
# goroutines of each process must stay flat after the warm-up and no
# request may fail outside a restart window. The JSON summary is the last
# line of the output and .cache/soak.json.
SOAK_DURATION ?= 30m
soak: test-deps
	@FUSION_SOAK=1 SOAK_DURATION=$(SOAK_DURATION) SOAK_OUT=$(CURDIR)/.cache/soak.json $(TEST_ENV) \
		$(GO) test -count=1 -timeout 0 -run '^TestSoak$$' -v ./cmd/fusion >.cache/soak.log 2>&1; rc=$$?; \
		grep -E '^(--- |ok|FAIL|\s+soak_test)' .cache/soak.log; cat .cache/soak.json; exit $$rc

# Runs every fuzz target for FUZZTIME each (go test allows one target per run).
fuzz:
	@./scripts/fuzz.sh $(FUZZTIME)

vet:
	$(GO) vet ./...

clean:
	rm -rf bin
