#!/usr/bin/env bash
# Prints the packages of ./... in the order make test's race pass gives
# them to go test, which starts them in that order, two at a time (-p is
# the core count). The slowest packages go first (their last measured
# times, from `scripts/slowtests.py .cache/test.json`), so that the pass
# does not end with one long package running alone after the many short
# ones; the rest follow in go list's order. A package named here that no
# longer exists is left out, with a warning.
set -euo pipefail
cd "$(dirname "$0")/.."
# Slowest first: seconds under -race in the last full run (2026-12-03).
slow=(
	fusion/engine/model     # 568
	fusion/router/openai    # 437
	fusion/node             # 405
	fusion/engine/runner    # 312
	fusion/engine/tokenizer # 239
	fusion/engine/embed     # 237
	fusion/engine/backend/mlx # 190
	fusion/engine/whisper   # 169
	fusion/dashboard        # 156
	fusion/cmd/fusion       # 151
	fusion/engine/demo      # 141
	fusion/engine/grammar   # 132
)
declare -A rest
mapfile -t all < <(${GO:-go} list ./...)
for p in "${all[@]}"; do rest[$p]=1; done
for p in "${slow[@]}"; do
	if [[ -n ${rest[$p]:-} ]]; then
		echo "$p"
		unset "rest[$p]"
	else
		echo "testpkgs.sh: $p is not a package of ./... any more" >&2
	fi
done
for p in "${all[@]}"; do
	[[ -n ${rest[$p]:-} ]] && echo "$p"
done
exit 0
