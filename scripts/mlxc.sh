#!/usr/bin/env bash
# Builds libmlxc (mlx-c, the C API of MLX) from the vendored source tarball
# against an installed MLX, into a cache outside the clone, and prints the
# directory it is in (its lib/ holds libmlxc.so or libmlxc.dylib, its include/
# the mlx-c headers). Idempotent: the cache is keyed by the tarball's sha256
# and the MLX version, and a second run with the same key builds nothing.
# Atomic: the build happens in a temporary directory next to the cache entry
# and is renamed into place only once installed.
#
# Linux: MLX is the mlx-cpu wheel of the test venv (scripts/requirements-test.txt);
# libmlx.so and the wheel's grafted BLAS/LAPACK are copied beside libmlxc so
# the entry does not depend on the venv staying where it is.
# macOS: MLX is Homebrew's mlx (Metal); libmlxc points at it by rpath.
# (The macOS branch is written from Homebrew's layout and untested here.)
#
# Environment:
#   FUSION_MLXC_TARBALL  the mlx-c tarball (default ../shared/vendor/mlx-c-fba4470.tar.gz
#                        relative to the repository root)
#   FUSION_MLXC_CACHE    the cache root (default $HOME/.cache/fusion/mlxc)
#   FUSION_PYTHON        the venv's python, Linux (default .cache/venv/bin/python)
#   FUSION_MLXC_JOBS     parallel compile jobs (default: the number of CPUs)
# Progress goes to stderr; stdout is only the directory.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tarball=${FUSION_MLXC_TARBALL:-$root/../shared/vendor/mlx-c-fba4470.tar.gz}
cache=${FUSION_MLXC_CACHE:-$HOME/.cache/fusion/mlxc}
os=$(uname -s)
arch=$(uname -m)

say() { echo "mlxc: $*" >&2; }
die() {
	say "$*"
	exit 1
}

[ -f "$tarball" ] || die "no mlx-c source tarball at $tarball (set FUSION_MLXC_TARBALL)"
if command -v sha256sum >/dev/null 2>&1; then
	sum=$(sha256sum "$tarball" | cut -d' ' -f1)
else
	sum=$(shasum -a 256 "$tarball" | cut -d' ' -f1)
fi

case "$os" in
Linux)
	python=${FUSION_PYTHON:-$root/.cache/venv/bin/python}
	[ -x "$python" ] || die "no python at $python (run make test-deps, or set FUSION_PYTHON)"
	site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
	mlx_dir=$site/mlx/share/cmake/MLX
	mlx_lib=$site/mlx/lib
	libname=libmlxc.so
	# libmlx.so is copied to <entry>/mlx/lib; its own RPATH
	# ($ORIGIN/../../mlx_cpu.libs) then finds the copied <entry>/mlx_cpu.libs.
	rpath='$ORIGIN/../mlx/lib'
	;;
Darwin)
	command -v brew >/dev/null 2>&1 || die "Homebrew is needed for MLX on macOS (brew install mlx)"
	prefix=$(brew --prefix mlx 2>/dev/null) || die "Homebrew's mlx is not installed (brew install mlx)"
	mlx_dir=$prefix/share/cmake/MLX
	mlx_lib=$prefix/lib
	libname=libmlxc.dylib
	rpath=$mlx_lib
	;;
*)
	die "no MLX build for $os"
	;;
esac

[ -f "$mlx_dir/MLXConfigVersion.cmake" ] || die "no MLX CMake package at $mlx_dir (Linux: pip install mlx-cpu==0.31.2 in the venv)"
version=$(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")$/\1/p' "$mlx_dir/MLXConfigVersion.cmake")
[ -n "$version" ] || die "cannot read MLX's version from $mlx_dir/MLXConfigVersion.cmake"

key=${sum:0:16}-mlx$version-$os-$arch
dest=$cache/$key
if [ -f "$dest/lib/$libname" ]; then
	say "cached: $dest"
	echo "$dest"
	exit 0
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/.build-$key.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "building $key in $work (MLX $version from $mlx_dir)"
start=$(date +%s)

tar -xzf "$tarball" -C "$work"
src=$(find "$work" -mindepth 2 -maxdepth 2 -name CMakeLists.txt -print -quit)
[ -n "$src" ] || die "no CMakeLists.txt in $tarball"
src=$(dirname "$src")

jobs=${FUSION_MLXC_JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}
cmake -S "$src" -B "$work/build" \
	-DCMAKE_BUILD_TYPE=Release \
	-DMLX_C_USE_SYSTEM_MLX=ON \
	-DBUILD_SHARED_LIBS=ON \
	-DMLX_C_BUILD_EXAMPLES=OFF \
	-DMLX_DIR="$mlx_dir" \
	-DCMAKE_INSTALL_RPATH="$rpath" >&2
cmake --build "$work/build" -j "$jobs" >&2
cmake --install "$work/build" --prefix "$work/install" >&2

if [ "$os" = Linux ]; then
	mkdir -p "$work/install/mlx/lib"
	cp "$mlx_lib/libmlx.so" "$work/install/mlx/lib/"
	if [ -d "$site/mlx_cpu.libs" ]; then
		cp -R "$site/mlx_cpu.libs" "$work/install/mlx_cpu.libs"
	fi
fi
printf 'mlx-c tarball sha256 %s\nMLX %s from %s\nbuilt %s in %ss\n' \
	"$sum" "$version" "$mlx_dir" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(($(date +%s) - start))" >"$work/install/BUILD-INFO"

# rename(2) of a directory fails if the target exists, so a concurrent build
# that finished first wins and this one is discarded.
if mv --version >/dev/null 2>&1; then
	mv -T "$work/install" "$dest" 2>/dev/null || [ -f "$dest/lib/$libname" ] || die "cannot move the build to $dest"
else
	perl -e 'rename($ARGV[0], $ARGV[1]) or exit 1' "$work/install" "$dest" || [ -f "$dest/lib/$libname" ] || die "cannot move the build to $dest"
fi
say "built in $(($(date +%s) - start))s: $dest"
echo "$dest"
