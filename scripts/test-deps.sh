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
scripts/fixtures.sh .cache/fixtures
