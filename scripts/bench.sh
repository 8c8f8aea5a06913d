#!/usr/bin/env bash
# make bench: runs every benchmark program and prints one JSON document.
# Each part is a `fusion bench <name>` sub-command printing a JSON object.
set -euo pipefail
bin=${BIN:-bin/fusion}
parts=(${BENCH_PARTS:-tokenizer tokens grammar server engine moe batch speculative cache forward raft pipeline mlx embed whisper speech auth image})
echo "{"
first=1
for p in "${parts[@]}"; do
	out=$("$bin" bench "$p")
	[ $first -eq 1 ] || echo ","
	first=0
	printf '  "%s": %s' "$p" "$out"
done
echo
echo "}"
