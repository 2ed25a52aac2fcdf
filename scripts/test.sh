#!/usr/bin/env bash
# Run the whole test suite. Needs PostgreSQL and Redis: DATABASE_URL and CELERY_BROKER_URL default
# to postgres://postgres@127.0.0.1:5432/postgres and redis://127.0.0.1:6379/15 (see pyproject.toml).
# Browser tests need Debian's chromium at /usr/bin/chromium (installed here when run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "warning: could not install chromium; browser tests will fail" >&2
fi
.venv/bin/ruff check .
FAIRSHARE_DEBUG=true .venv/bin/python manage.py makemigrations --check --dry-run >/dev/null
exec .venv/bin/pytest -p no:cacheprovider "$@"
