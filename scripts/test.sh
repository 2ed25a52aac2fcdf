#!/usr/bin/env bash
# Run the whole test suite on PostgreSQL (the production database), then again, on SQLite (the
# embedded default the demo runs on), every test that reaches the database (tests/conftest.py,
# FAIRSHARE_TEST_PASS=sqlite: the rest ran already and would prove nothing new; tests marked
# one_database run on PostgreSQL only). Needs PostgreSQL and Redis: DATABASE_URL and
# CELERY_BROKER_URL default to postgres://postgres@127.0.0.1:5432/postgres and
# redis://127.0.0.1:6379/15 (see pyproject.toml). Browser tests need Debian's chromium at
# /usr/bin/chromium (installed here when run as root); without it they are skipped, with the
# reason in pytest's summary. FAIRSHARE_TEST_SQLITE=false skips the SQLite pass;
# FAIRSHARE_TEST_WORKERS (default 2) sets pytest-xdist's worker count.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "warning: could not install chromium; the browser tests will be skipped" >&2
fi
.venv/bin/ruff check .
# checkov for tests/deploy/test_checkov.py, in its own virtualenv (.venv-checkov): its pinned
# libraries must not change the versions in .venv.
scripts/checkov.sh --install
FAIRSHARE_DEBUG=true .venv/bin/python manage.py makemigrations --check --dry-run >/dev/null
workers=${FAIRSHARE_TEST_WORKERS:-2}
if [ ! -x /usr/bin/chromium ]; then
  echo "note: /usr/bin/chromium is missing: the browser tests (tests/browser/) will be skipped" >&2
fi
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# One pass of pytest; its last line ("N passed, M skipped, K deselected in S s") is kept for the
# summary at the end.
run_pass() {
  local name=$1
  shift
  local started=$SECONDS status=0
  .venv/bin/pytest -p no:cacheprovider -n "$workers" "$@" | tee "$scratch/$name.log" || status=$?
  summary+=("$name: $(grep -E '^=+ .* in [0-9.]+s' "$scratch/$name.log" | tail -1 | tr -d '=' |
    sed 's/^ *//; s/ *$//') (wall $((SECONDS - started)) s)")
  return "$status"
}
summary=()

echo "== pytest on PostgreSQL (${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres})"
run_pass PostgreSQL "$@"

if [ "${FAIRSHARE_TEST_SQLITE:-true}" != "false" ]; then
  # Again on SQLite, what reaches the database: every query (hand-written ones included) must
  # give the same results there. Browser tests drive the same views and ran above.
  echo "== pytest on SQLite (the tests that reach the database; FAIRSHARE_TEST_PASS=sqlite)"
  DATABASE_URL="sqlite:///$scratch/test.sqlite3" FAIRSHARE_TEST_PASS=sqlite \
    FAIRSHARE_TEST_PASS_REPORT="$scratch/sqlite-selection" run_pass SQLite -m "not browser" "$@"
  summary+=("SQLite selection: $(cat "$scratch/sqlite-selection" 2>/dev/null || echo unknown)")
fi
printf '%s\n' "${summary[@]}"
