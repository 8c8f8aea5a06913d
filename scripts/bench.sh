#!/usr/bin/env bash
# make bench: runs every benchmark program and prints one JSON document.
# Each part is a `fusion bench <name>` sub-command printing a JSON object.
set -euo pipefail
bin=${BIN:-bin/fusion}
# The engine part runs llama-bench on its GGUF files in the same run: the
# build of scripts/llamacpp.sh (make test-deps makes it) unless LLAMA_BENCH
# names another.
if [ -z "${LLAMA_BENCH:-}" ] && llamacpp=$(FUSION_LLAMACPP_NO_BUILD=1 scripts/llamacpp.sh 2>/dev/null); then
	export LLAMA_BENCH=$llamacpp/lib/llama-bench
fi
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
