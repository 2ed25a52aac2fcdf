#!/usr/bin/env bash
# Start the README's run command (scripts/demo.sh) on a clean copy of this checkout's HEAD, on a
# free port, exactly as a new user gets it (SQLite, the embedded Celery transport, the demo
# snapshot), wait for /healthz, walk it in Chromium as every demo role (scripts/walk_demo.py),
# then stop it by its process id. Exit status: the walk's.
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD
scratch=$(mktemp -d)
copy="$scratch/fairshare"
git clone -q --no-hardlinks "$here" "$copy"
# The same dependencies as this checkout's (scripts/bootstrap.sh installs from pyproject.toml and
# skips the install while its stamp matches): reuse the installed environment rather than spend a
# minute re-installing it in the copy. A fresh machine's first bootstrap is what .ci/run runs.
if [ -x "$here/.venv/bin/python" ] && [ -z "${WALK_FRESH_VENV:-}" ]; then
  ln -s "$here/.venv" "$copy/.venv"
fi
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log="$scratch/demo.log"
started=$(date +%s)
(cd "$copy" && exec env -u DATABASE_URL -u CELERY_BROKER_URL -u REDIS_URL \
  -u FAIRSHARE_CLUSTER -u FAIRSHARE_DEBUG PORT="$port" setsid scripts/demo.sh) >"$log" 2>&1 &
demo=$!
stop() {
  kill -TERM -- "-$demo" 2>/dev/null || kill -TERM "$demo" 2>/dev/null || true
  wait "$demo" 2>/dev/null || true
}
trap 'stop; rm -rf "$scratch"' EXIT
ready=""
for _ in $(seq 1 600); do
  if ! kill -0 "$demo" 2>/dev/null; then
    echo "the demo exited before it was ready:" >&2
    cat "$log" >&2
    exit 1
  fi
  if grep -q "Fairshare is running at" "$log" && curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then
    ready=1
    break
  fi
  sleep 1
done
if [ -z "$ready" ]; then
  echo "the demo was not ready within 10 minutes:" >&2
  cat "$log" >&2
  exit 1
fi
echo "demo ready on port $port after $(( $(date +%s) - started )) s"
grep -E "^Demo history" "$log" || true
status=0
"$here/.venv/bin/python" "$here/scripts/walk_demo.py" --url "http://127.0.0.1:$port" || status=$?
if [ "$status" != 0 ]; then
  echo "--- demo logs" >&2
  tail -n 50 "$copy"/var/*.log >&2 || true
fi
exit "$status"
