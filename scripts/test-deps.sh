#!/usr/bin/env bash
# Installs what the tests need, idempotently: Python reference packages in a
# virtual environment under .cache, and the registry fixtures.
set -euo pipefail
venv=${FUSION_VENV:-.cache/venv}
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
	apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
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
# The openai npm package for the Node client tests (router/openai/testdata/node), pinned.
node_prefix=${FUSION_NODE_PREFIX:-.cache/node}
if command -v npm >/dev/null 2>&1 && [ "$(node -p "require('./$node_prefix/node_modules/openai/package.json').version" 2>/dev/null)" != "6.30.1" ]; then
	mkdir -p "$node_prefix"
	npm install --silent --no-audit --no-fund --save-exact --prefix "$node_prefix" openai@6.30.1
fi
PYTHON="$venv/bin/python" scripts/fixtures.sh .cache/fixtures
