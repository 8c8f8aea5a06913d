#!/usr/bin/env bash
# Builds llama.cpp (CPU only) from the source that PyPI's llama-cpp-python
# sdist bundles, into a cache outside the clone, and prints the directory it
# is in:
#   <entry>/lib/          libllama.so, the ggml libraries and llama-bench
#                         (RPATH $ORIGIN)
#   <entry>/python/       the sdist's pure-Python llama_cpp package (ctypes
#                         bindings for exactly this libllama); put it on
#                         PYTHONPATH: llama_cpp/lib links to <entry>/lib
#   <entry>/BUILD-INFO    what was built, from what, and how long it took
# The GGUF interop tests (engine/quant) load fusion's GGUF outputs through
# the Python bindings; `make bench` runs llama-bench on the same GGUF.
#
# Idempotent: the cache is keyed by the sdist's sha256 and the host CPU's
# flags (the build is GGML_NATIVE: llama.cpp gets the kernels this CPU runs,
# as fusion's engine picks its own at run time, so a same-run benchmark is
# fair; another CPU gets its own entry rather than a binary it cannot run).
# Only the first run pays (the download, and a compile of ~12 CPU-minutes:
# 67 minutes on two cores shared with a loaded machine). Atomic: the build
# happens in a temporary directory next to the cache entry and is renamed
# into place once complete.
#
# Environment:
#   FUSION_LLAMACPP_CACHE  the cache root (default $HOME/.cache/fusion/llamacpp)
#   FUSION_PYTHON          python with pip, to download the sdist (default .cache/venv/bin/python)
#   FUSION_LLAMACPP_JOBS   parallel compile jobs (default: the number of CPUs)
#   FUSION_LLAMACPP_NO_BUILD=1  only print a cached entry (exit 1 without one):
#                          how the tests and the benchmark find the build
# Progress goes to stderr; stdout is only the directory.
#
# With --ggml-ref it builds instead the reference ggml-base library alone
# (<entry>/lib/libggml-base.so), GGML_NATIVE off and with no FMA or AVX2,
# so the C compiler cannot fuse multiply-adds in quantize_row_*_ref: the
# oracle engine/gguf's quantizers are compared with byte for byte
# (TestQuantizeMatchesLlamaCpp). Its key has no CPU flags (the build is
# for the baseline of the architecture); about a CPU-minute.
set -euo pipefail
ref=
if [ "${1:-}" = --ggml-ref ]; then
	ref=1
fi

version=0.3.36
sdist=llama_cpp_python-$version.tar.gz
sdist_sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${FUSION_LLAMACPP_CACHE:-$HOME/.cache/fusion/llamacpp}
python=${FUSION_PYTHON:-$root/.cache/venv/bin/python}
os=$(uname -s)
arch=$(uname -m)

say() { echo "llamacpp: $*" >&2; }
die() {
	say "$*"
	exit 1
}

[ "$os" = Linux ] || die "only the Linux CPU build is scripted (on macOS: brew install llama.cpp)"
flags=$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo | cut -d: -f2 | tr ' ' '\n' | sort -u | tr -d '\n' | sha256sum | cut -c1-12)
key=llama-cpp-python-$version-${sdist_sha256:0:12}-cpu$flags-$arch
[ -z "$ref" ] || key=ggml-base-ref-$version-${sdist_sha256:0:12}-$arch
dest=$cache/$key
if [ -n "$ref" ] && [ -f "$dest/lib/libggml-base.so" ]; then
	say "cached: $dest"
	echo "$dest"
	exit 0
fi
if [ -z "$ref" ] && [ -x "$dest/lib/llama-bench" ] && [ -f "$dest/lib/libllama.so" ] && [ -f "$dest/python/llama_cpp/llama_cpp.py" ]; then
	say "cached: $dest"
	echo "$dest"
	exit 0
fi
[ "${FUSION_LLAMACPP_NO_BUILD:-}" != 1 ] || die "no build at $dest (FUSION_LLAMACPP_NO_BUILD=1)"
for tool in cmake c++ cc make; do
	command -v "$tool" >/dev/null 2>&1 || die "$tool is needed to build llama.cpp (apt-get install cmake build-essential)"
done
[ -x "$python" ] || die "no python at $python (run make test-deps, or set FUSION_PYTHON)"

mkdir -p "$cache"
work=$(mktemp -d "$cache/.build-$key.XXXXXX")
trap 'rm -rf "$work"' EXIT
start=$(date +%s)

# The sdist, checked against its pinned sha256 (a copy kept beside the
# entries saves the download when only the CPU changed; the fixtures'
# copy, which Gemma 4's tokenizer comes from, saves the first one).
fixture=${FUSION_FIXTURES:-$root/.cache/fixtures}/pypi/$sdist
if [ ! -f "$cache/$sdist" ] && [ -f "$fixture" ]; then
	cp "$fixture" "$cache/$sdist"
fi
if [ ! -f "$cache/$sdist" ] || [ "$(sha256sum "$cache/$sdist" | cut -d' ' -f1)" != "$sdist_sha256" ]; then
	say "downloading llama-cpp-python $version (sdist)"
	"$python" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d "$work/dl" "llama-cpp-python==$version" >&2
	mv "$work/dl/$sdist" "$cache/$sdist"
fi
got=$(sha256sum "$cache/$sdist" | cut -d' ' -f1)
[ "$got" = "$sdist_sha256" ] || die "$sdist: sha256 $got, want $sdist_sha256"

say "building $key in $work"
tar -xzf "$cache/$sdist" -C "$work"
src=$work/llama_cpp_python-$version
jobs=${FUSION_LLAMACPP_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}
if [ -n "$ref" ]; then
	cmake -S "$src/vendor/llama.cpp" -B "$work/build" \
		-DCMAKE_BUILD_TYPE=Release \
		-DBUILD_SHARED_LIBS=ON \
		-DGGML_NATIVE=OFF \
		-DGGML_FMA=OFF \
		-DGGML_AVX2=OFF \
		-DGGML_CPU=ON \
		-DLLAMA_CURL=OFF \
		-DLLAMA_BUILD_TESTS=OFF \
		-DLLAMA_BUILD_EXAMPLES=OFF \
		-DLLAMA_BUILD_SERVER=OFF \
		-DLLAMA_BUILD_TOOLS=OFF \
		-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
		-DCMAKE_INSTALL_RPATH='$ORIGIN' >&2
	cmake --build "$work/build" -j "$jobs" --target ggml-base >&2
	mkdir -p "$work/out/lib"
	cp -P "$work/build/bin/"libggml-base.so* "$work/out/lib/"
	printf 'llama-cpp-python %s sdist sha256 %s: ggml-base alone, GGML_NATIVE/FMA/AVX2 off\nbuilt %s in %ss with %s jobs\n' \
		"$version" "$sdist_sha256" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(($(date +%s) - start))" "$jobs" >"$work/out/BUILD-INFO"
	mv -T "$work/out" "$dest" 2>/dev/null || [ -f "$dest/lib/libggml-base.so" ] || die "cannot move the build to $dest"
	say "built in $(($(date +%s) - start))s: $dest"
	echo "$dest"
	exit 0
fi
cmake -S "$src/vendor/llama.cpp" -B "$work/build" \
	-DCMAKE_BUILD_TYPE=Release \
	-DBUILD_SHARED_LIBS=ON \
	-DGGML_NATIVE=ON \
	-DGGML_CPU=ON \
	-DLLAMA_CURL=OFF \
	-DLLAMA_OPENSSL=OFF \
	-DLLAMA_BUILD_TESTS=OFF \
	-DLLAMA_BUILD_EXAMPLES=OFF \
	-DLLAMA_BUILD_SERVER=OFF \
	-DLLAMA_BUILD_TOOLS=ON \
	-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
	-DCMAKE_INSTALL_RPATH='$ORIGIN' >&2
cmake --build "$work/build" -j "$jobs" --target llama llama-bench >&2

mkdir -p "$work/out/lib" "$work/out/python"
cp -P "$work/build/bin/llama-bench" "$work/build/bin/"lib*.so* "$work/out/lib/"
cp -R "$src/llama_cpp" "$work/out/python/llama_cpp"
rm -rf "$work/out/python/llama_cpp/lib"
ln -s ../../lib "$work/out/python/llama_cpp/lib"
"$work/out/lib/llama-bench" --help >/dev/null 2>&1 || die "the built llama-bench does not run"
printf 'llama-cpp-python %s sdist sha256 %s (its vendored llama.cpp)\nCPU-only, GGML_NATIVE=ON, cpu flags hash %s\nbuilt %s in %ss with %s jobs\n' \
	"$version" "$sdist_sha256" "$flags" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(($(date +%s) - start))" "$jobs" >"$work/out/BUILD-INFO"

# rename(2) of a directory fails if the target exists, so a concurrent build
# that finished first wins and this one is discarded.
mv -T "$work/out" "$dest" 2>/dev/null || [ -f "$dest/lib/libllama.so" ] || die "cannot move the build to $dest"
say "built in $(($(date +%s) - start))s: $dest"
echo "$dest"
