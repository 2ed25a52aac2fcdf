#!/usr/bin/env bash
# Static analysis of the rendered deploy/ manifests with checkov (PyPI), from its own virtualenv
# (.venv-checkov: checkov pins many libraries, which must not change the versions in .venv).
#   scripts/checkov.sh --install   create/update .venv-checkov from deploy/checkov-requirements.txt
#   scripts/checkov.sh             render deploy/ with kubectl and scan it (skips: deploy/.checkov.yaml)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-checkov
requirements=deploy/checkov-requirements.txt
stamp="$venv/.requirements"
if [ ! -x "$venv/bin/checkov" ] || ! cmp -s "$requirements" "$stamp"; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$stamp"
fi
if [ "${1:-}" = "--install" ]; then
  exit 0
fi
rendered=$(mktemp -d)
trap 'rm -rf "$rendered"' EXIT
kubectl kustomize deploy/ >"$rendered/fairshare.yaml"
kubectl kustomize deploy/volcano/ >"$rendered/volcano.yaml"
cp deploy/monitoring/*.yaml "$rendered/"
"$venv/bin/checkov" --quiet --compact --skip-download --config-file deploy/.checkov.yaml \
  --framework kubernetes --directory "$rendered" "$@"
