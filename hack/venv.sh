#!/usr/bin/env bash
# The project's .venv for hack/test.sh and hack/demo.sh: made with $PYTHON (default python3), gpuctl
# installed editable with its dev extras. The install is skipped when .venv was installed from this very
# pyproject.toml: an editable install follows the source by itself, only pyproject.toml (dependencies,
# entry points) needs pip again, and pip's re-install of an unchanged checkout costs ~20 CPU-seconds (it
# builds the package in an isolated environment) every time the suite runs the demo.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ -x .venv/bin/python ]] || "${PYTHON:-python3}" -m venv .venv
stamp=.venv/.gpuctl-pyproject.sha256
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  rm -f "$stamp"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -e '.[dev]'
  echo "$want" >"$stamp"
fi
