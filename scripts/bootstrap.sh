#!/usr/bin/env bash
# Create .venv (if needed) and install Fairshare's dependencies with its development extras (read
# from pyproject.toml). Idempotent and quick when nothing changed: the install is skipped while
# pyproject.toml is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.fairshare-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  # The project runs from this checkout (manage.py, celery -A config, gunicorn all import it from
  # here), so only its dependencies are installed: no build step, nothing to warn about.
  .venv/bin/python - <<'PY' > .venv/requirements.txt
import tomllib

with open("pyproject.toml", "rb") as fh:
    project = tomllib.load(fh)["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["dev"]))
PY
  .venv/bin/python -m pip install --quiet -r .venv/requirements.txt
  echo "$want" > "$stamp"
fi
