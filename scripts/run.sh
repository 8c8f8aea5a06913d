#!/usr/bin/env bash
# make run: makes sure a demo model exists, starts a single node, waits for
# it to answer /health and prints a curl line to try. Ctrl-C (or SIGTERM)
# drains the node and stops it.
# Usage: scripts/run.sh BIN DATA_DIR MODELS_DIR [extra serve flags...]
set -euo pipefail
bin=$1 data=$2 models=$3
shift 3
listen=${FUSION_LISTEN:-127.0.0.1:8000}
mkdir -p "$models"
if [ -z "$(ls -A "$models" 2>/dev/null)" ]; then
	echo "run: no models in $models; creating a demo model"
	# --stop-after: the demo ends its answers on its own after a few dozen
	# tokens, so a curl or a real client does not wait for max_tokens.
	"$bin" models create-demo --arch qwen3 --stop-after "${FUSION_DEMO_STOP_AFTER:-40}" --out "$models/demo"
fi
model=$(find "$models" -mindepth 1 -maxdepth 1 \( -type d -o -name '*.gguf' \) ! -name '.*' -printf '%f\n' | sort | head -n1)
model=${model%.gguf}

"$bin" serve --listen "$listen" --data-dir "$data" --models-dir "$models" "$@" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null; wait "$pid"; exit $?' INT TERM

for _ in $(seq 1 100); do
	if curl -fsS "http://$listen/health" >/dev/null 2>&1; then
		auth=
		if [ -n "${FUSION_API_KEY:-}" ]; then auth=" -H 'Authorization: Bearer $FUSION_API_KEY'"; fi
		cat <<EOT

run: the node is up at http://$listen (Ctrl-C stops it). Try:

  curl -s http://$listen/v1/chat/completions -H 'Content-Type: application/json'$auth \\
    -d '{"model":"$model","messages":[{"role":"user","content":"Hello!"}],"max_tokens":32}'

EOT
		break
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		wait "$pid"
		exit $?
	fi
	sleep 0.1
done
wait "$pid"
