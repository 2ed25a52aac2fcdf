#!/usr/bin/env bash
# Run the whole test suite, twice: on PostgreSQL (the production database) and on SQLite (the
# embedded default the demo runs on). Needs PostgreSQL and Redis: DATABASE_URL and
# CELERY_BROKER_URL default to postgres://postgres@127.0.0.1:5432/postgres and
# redis://127.0.0.1:6379/15 (see pyproject.toml). Browser tests need Debian's chromium at
# /usr/bin/chromium (installed here when run as root). FAIRSHARE_TEST_SQLITE=false skips the
# SQLite pass; FAIRSHARE_TEST_WORKERS (default 2) sets pytest-xdist's worker count.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "warning: could not install chromium; browser tests will fail" >&2
fi
.venv/bin/ruff check .
# checkov for tests/deploy/test_checkov.py, in its own virtualenv (.venv-checkov): its pinned
# libraries must not change the versions in .venv.
scripts/checkov.sh --install
FAIRSHARE_DEBUG=true .venv/bin/python manage.py makemigrations --check --dry-run >/dev/null
workers=${FAIRSHARE_TEST_WORKERS:-2}

echo "== pytest on PostgreSQL (${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres})"
.venv/bin/pytest -p no:cacheprovider -n "$workers" "$@"

if [ "${FAIRSHARE_TEST_SQLITE:-true}" != "false" ]; then
  # The same suite on SQLite: every query (hand-written ones included) must give the same
  # results there. Browser tests drive the same views and ran above.
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  echo "== pytest on SQLite"
  DATABASE_URL="sqlite:///$scratch/test.sqlite3" \
    .venv/bin/pytest -p no:cacheprovider -n "$workers" -m "not browser" "$@"
fi
