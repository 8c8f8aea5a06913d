#!/usr/bin/env bash
# Installs what the tests need, idempotently: Python reference packages in a
# virtual environment under .cache, the registry fixtures, and libmlxc
# (built once per mlx-c source and MLX version, cached in ~/.cache/fusion/mlxc).
set -euo pipefail
venv=${FUSION_VENV:-.cache/venv}
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
	apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
fi
# Debian's chromium for the admin panel's browser tests (dashboard), driven
# by chromedp; no browser download.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
	apt-get update -qq && apt-get install -y -qq chromium >/dev/null
fi
# Debian's ffmpeg (with ffprobe) for the audio formats without a Go decoder
# (Opus, AAC/M4A; engine/audio), and as the reference decoder its tests
# compare against; espeak-ng synthesizes the speech clips of the audio
# front-end tests; ruby checks the Homebrew formula (deploy/homebrew: ruby
# -c and a stand-in for Homebrew's DSL).
for tool in ffmpeg espeak-ng ruby; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		apt-get update -qq && apt-get install -y -qq "$tool" >/dev/null
	fi
done
# git-lfs for the Hub tests' model repositories (internal/hubtest).
if ! command -v git-lfs >/dev/null 2>&1; then
	apt-get update -qq && apt-get install -y -qq git-lfs >/dev/null
fi
if [ ! -x "$venv/bin/python" ]; then
	python3 -m venv "$venv"
fi
stamp="$venv/.requirements.sha256"
want=$(sha256sum scripts/requirements-test.txt | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
	"$venv/bin/python" -m pip install -q --disable-pip-version-check -r scripts/requirements-test.txt
	echo "$want" >"$stamp"
fi
# Pinned npm packages, under .cache/node; each is installed only when the
# cached copy is missing or another version:
# - openai: the Node client tests (router/openai/testdata/node);
# - the Claude Code CLI: node/claudecode_cli_test.go (a native binary per
#   platform, from the package's optional dependencies);
# - real MCP servers: the MCP host tests (mcp/host, node).
node_prefix=${FUSION_NODE_PREFIX:-.cache/node}
for pkg in openai@6.30.1 @anthropic-ai/claude-code@2.1.328 \
	@modelcontextprotocol/server-everything@2026.8.31 @modelcontextprotocol/server-filesystem@2026.8.31; do
	name=${pkg%@*}
	if command -v npm >/dev/null 2>&1 && [ "$(node -p "require('./$node_prefix/node_modules/$name/package.json').version" 2>/dev/null)" != "${pkg##*@}" ]; then
		mkdir -p "$node_prefix"
		npm install --silent --no-audit --no-fund --save-exact --prefix "$node_prefix" "$pkg"
	fi
done
PYTHON="$venv/bin/python" scripts/fixtures.sh .cache/fixtures
# libmlxc for engine/backend/mlx, against the venv's mlx-cpu wheel; the
# script prints the cache entry on stderr (stdout is only its path).
FUSION_PYTHON="$venv/bin/python" scripts/mlxc.sh >/dev/null
# llama.cpp (CPU only) from llama-cpp-python's sdist: libllama and its Python
# bindings for the GGUF interop tests (engine/quant), llama-bench for make
# bench's same-run comparison. Built once per sdist and CPU, cached in
# ~/.cache/fusion/llamacpp (~12 CPU-minutes the first time).
FUSION_PYTHON="$venv/bin/python" scripts/llamacpp.sh >/dev/null
# ggml-base alone, with no fused multiply-adds: the oracle of engine/gguf's
# K-quant quantizers (about a CPU-minute, cached beside the build above).
FUSION_PYTHON="$venv/bin/python" scripts/llamacpp.sh --ggml-ref >/dev/null
