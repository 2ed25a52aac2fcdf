#!/usr/bin/env bash
# Run Fairshare with the embedded defaults: SQLite, the filesystem Celery transport (no Redis), the
# demo cluster snapshot (no Kubernetes), demo data. Starts the web server, a Celery worker and beat.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh

export FAIRSHARE_DEBUG=${FAIRSHARE_DEBUG:-false}
export FAIRSHARE_SECURE_COOKIES=${FAIRSHARE_SECURE_COOKIES:-false}
export FAIRSHARE_VAR_DIR=${FAIRSHARE_VAR_DIR:-$PWD/var}
PORT=${PORT:-8000}
# Links in the notification emails point at this server.
export FAIRSHARE_BASE_URL=${FAIRSHARE_BASE_URL:-http://127.0.0.1:$PORT}
# Notification emails go to files (one per message) instead of flooding this terminal.
export EMAIL_BACKEND=${EMAIL_BACKEND:-django.core.mail.backends.filebased.EmailBackend}
export EMAIL_FILE_PATH=${EMAIL_FILE_PATH:-$FAIRSHARE_VAR_DIR/mail}
# The demo's GPU "agents" (backfill_demo --follow, below) report every minute.
export FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS=${FAIRSHARE_GPU_AGENT_INTERVAL_SECONDS:-60}
export FAIRSHARE_LOG_FORMAT=${FAIRSHARE_LOG_FORMAT:-plain}
# Fairness over time (docs/drf.md "Past use"): the five replayed weeks weigh in, half-life 7 days.
export FAIRSHARE_USAGE_HALF_LIFE=${FAIRSHARE_USAGE_HALF_LIFE:-7d}
mkdir -p "$FAIRSHARE_VAR_DIR"
if [ -z "${SECRET_KEY:-}" ] && [ -z "${SECRET_KEY_FILE:-}" ]; then
  [ -f "$FAIRSHARE_VAR_DIR/secret_key" ] || .venv/bin/python -c \
    "import secrets; print(secrets.token_urlsafe(50))" > "$FAIRSHARE_VAR_DIR/secret_key"
  export SECRET_KEY_FILE="$FAIRSHARE_VAR_DIR/secret_key"
fi
# Unset broker → embedded transport; an inherited test broker would surprise the demo.
if [ -z "${FAIRSHARE_USE_ENV_BROKER:-}" ]; then unset CELERY_BROKER_URL; fi

PY=.venv/bin/python
$PY manage.py migrate --noinput -v0
$PY manage.py collectstatic --noinput -v0
$PY manage.py seed_demo
echo "Replaying five weeks of demo history (collections, GPU samples, rollups; about a minute)..."
$PY manage.py backfill_demo >"$FAIRSHARE_VAR_DIR/backfill.log" 2>&1 \
  || { echo "the demo history failed; see $FAIRSHARE_VAR_DIR/backfill.log" >&2; exit 1; }
tail -n 1 "$FAIRSHARE_VAR_DIR/backfill.log"
# Shares first (from the replayed history), so the collection's workloads are judged against a
# fair allocation ("waiting: cv-team's queue is at its fair allocation, ...").
$PY manage.py shell -c "from scheduling.services import compute_shares; compute_shares(trigger='demo')" \
  >/dev/null 2>&1 || true
$PY manage.py collect_usage >/dev/null 2>&1 || echo "note: usage collection failed; see the worker log"

pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM
.venv/bin/celery -A config worker --pool=solo --loglevel=WARNING >"$FAIRSHARE_VAR_DIR/worker.log" 2>&1 &
pids+=($!)
.venv/bin/celery -A config beat --loglevel=WARNING \
  --schedule="$FAIRSHARE_VAR_DIR/celerybeat-schedule" >"$FAIRSHARE_VAR_DIR/beat.log" 2>&1 &
pids+=($!)
$PY manage.py backfill_demo --follow >"$FAIRSHARE_VAR_DIR/gpu-feed.log" 2>&1 &
pids+=($!)
.venv/bin/gunicorn config.wsgi:application --bind "127.0.0.1:$PORT" --workers 2 --threads 4 \
  --access-logfile - --error-logfile - >"$FAIRSHARE_VAR_DIR/web.log" 2>&1 &
pids+=($!)

for _ in $(seq 1 50); do
  if curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1; then break; fi
  sleep 0.2
done
cat <<MSG

Fairshare is running at http://127.0.0.1:$PORT/  (logs in $FAIRSHARE_VAR_DIR/*.log,
notification emails in $EMAIL_FILE_PATH/)
Sign in with one of the demo logins above, e.g. rita / rita-demo-pass (lead of research-team)
or admin / admin-demo-pass (site admin). Press Ctrl-C to stop.
MSG
wait -n "${pids[@]}"
