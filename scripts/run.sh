#!/usr/bin/env bash
# make run: makes sure a demo model exists, then starts a single node.
set -euo pipefail
bin=$1 data=$2 models=$3
mkdir -p "$models"
if [ -z "$(ls -A "$models" 2>/dev/null)" ]; then
	echo "run: no models in $models; creating a demo model"
	"$bin" models create-demo --arch qwen3 --out "$models/demo"
fi
exec "$bin" serve --data-dir "$data" --models-dir "$models"
