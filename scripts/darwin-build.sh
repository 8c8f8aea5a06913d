#!/usr/bin/env bash
# Cross-builds fusion for the Mac (darwin/arm64) on any machine, as `make
# test` does, so a change that breaks the Mac build fails here first:
#
#  1. every non-main package, cgo included (engine/backend/mlx's dlopen
#     binding), compiled with zig as the C compiler (PyPI `ziglang`, in the
#     test venv), and `go vet` of the cgo packages (their tests included);
#  2. the fusion binary linked for darwin/arm64. Linking needs the
#     libraries Go's standard library imports on macOS (CoreFoundation and
#     Security for crypto/x509, libresolv for net), which only a Mac's SDK
#     has. The script writes text stubs (.tbd) for them that export exactly
#     the symbols the standard library declares with //go:cgo_import_dynamic
#     under those install names, so the linker records the same imports a
#     Mac link does. The binary is checked to be an arm64 Mach-O executable;
#     it cannot be run here;
#  3. CGO_ENABLED=0 builds of the binary for darwin/arm64 and the host
#     (MLX is unavailable there and says so at run time).
#
# zig's macOS headers lack <mach/mach_vm.h>, which the Prometheus client's
# cgo process collector includes; scripts/darwin/include has a one-function
# stand-in (see its comment).
#
# Usage: scripts/darwin-build.sh [OUT]: OUT, when given, receives the linked
# darwin/arm64 binary (for a Mac that has libmlxc; see engine/backend/mlx).
# Environment: FUSION_PYTHON (default .cache/venv/bin/python), GO (default go).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
py=${FUSION_PYTHON:-.cache/venv/bin/python}
go=${GO:-go}
say() { echo "darwin-build: $*" >&2; }
die() {
	say "$*"
	exit 1
}

"$py" -m ziglang version >/dev/null 2>&1 || die "zig not found: $py -m ziglang (pip install ziglang, see scripts/requirements-test.txt)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Text stubs for the Mac libraries the standard library imports from,
# written from GOROOT's own //go:cgo_import_dynamic lines.
stub() { # name install-name file
	local syms
	syms=$(grep -rhoE "^//go:cgo_import_dynamic [^ ]+ [^ ]+ \"$2\"" --include='*.go' "$($go env GOROOT)/src" |
		awk '{print "_" $3}' | sort -u | paste -sd, -)
	[ -n "$syms" ] || die "no symbols imported from $2 in GOROOT (Go changed how it links on macOS?)"
	mkdir -p "$(dirname "$3")"
	cat >"$3" <<TBD
--- !tapi-tbd
tbd-version: 4
targets: [ arm64-macos ]
install-name: '$2'
exports:
  - targets: [ arm64-macos ]
    symbols: [ $syms ]
...
TBD
}
stub CoreFoundation /System/Library/Frameworks/CoreFoundation.framework/Versions/A/CoreFoundation \
	"$work/Frameworks/CoreFoundation.framework/CoreFoundation.tbd"
stub Security /System/Library/Frameworks/Security.framework/Versions/A/Security \
	"$work/Frameworks/Security.framework/Security.tbd"
stub resolv /usr/lib/libresolv.9.dylib "$work/lib/libresolv.tbd"

export CGO_ENABLED=1 GOOS=darwin GOARCH=arm64
export CC="$py -m ziglang cc -target aarch64-macos"
export CGO_CFLAGS="-I$root/scripts/darwin/include"
export CGO_LDFLAGS="-F$work/Frameworks -L$work/lib"

mapfile -t pkgs < <($go list -f '{{if ne .Name "main"}}{{.ImportPath}}{{end}}' ./...)
say "compiling ${#pkgs[@]} packages for darwin/arm64 with cgo"
$go build "${pkgs[@]}"
mapfile -t cgopkgs < <($go list -f '{{if .CgoFiles}}{{.ImportPath}}{{end}}' ./...)
say "vetting the cgo packages for darwin/arm64: ${cgopkgs[*]}"
$go vet "${cgopkgs[@]}"

say "linking bin/fusion for darwin/arm64 against SDK stubs"
# -w: no DWARF. With DWARF, Go's linker hands the Mac binary to Apple's
# dsymutil and strip afterwards, which exist only on a Mac.
$go build -ldflags=-w -o "$work/fusion" ./cmd/fusion
# An arm64 Mach-O executable: magic 0xfeedfacf, CPU type 0x0100000c,
# file type 2 (MH_EXECUTE), little-endian.
head=$(od -An -tx4 -N16 "$work/fusion" | tr -s ' ')
[ "$head" = " feedfacf 0100000c 00000000 00000002" ] || die "bin/fusion for darwin is not an arm64 Mach-O executable: $head"
for lib in CoreFoundation.framework Security.framework libresolv.9.dylib libSystem.B.dylib; do
	grep -q "$lib" "$work/fusion" || die "the darwin binary does not load $lib"
done

if [ -n "${1:-}" ]; then
	cp "$work/fusion" "$1"
	say "wrote $1"
fi

say "CGO_ENABLED=0 builds (darwin/arm64 and $($go env GOHOSTOS)/$($go env GOHOSTARCH))"
CGO_ENABLED=0 $go build -o "$work/fusion-nocgo-darwin" ./cmd/fusion
CGO_ENABLED=0 GOOS= GOARCH= $go build -o "$work/fusion-nocgo-host" ./cmd/fusion
say "ok"
