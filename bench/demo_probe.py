"""Probe the running demo: one signed-in page load every few seconds, timed (issue 29).

The demo (``scripts/demo.sh``: SQLite, a Celery worker and beat, the GPU feed) runs background
writers next to the web server; a page that waits on one of them is a stall. This prints how
long each page load took and the figures the issue's target is stated in (never over 1 s).

Usage::

    .venv/bin/python bench/demo_probe.py --start [--port 8765] [--duration 180] [--interval 3]
    .venv/bin/python bench/demo_probe.py --base-url http://127.0.0.1:8000 --user rita \\
        --path /teams/research-team/

``--start`` runs ``scripts/demo.sh`` (of ``--root``, default this checkout) in a fresh scratch
directory (its own SQLite file, var dir and port), waits until it answers, lets the background
jobs start (``--warmup`` seconds), probes, then stops it. Without ``--start`` it probes a demo
already running at ``--base-url``. Several ``--path`` values are probed in turn (one request
per tick, round robin).
Prints per path: count, median, p95, max, how many over 1 s, and every slow load with its time.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLOW = 1.0  # seconds: the target


def _opener() -> urllib.request.OpenerDirector:
    jar = http.cookiejar.CookieJar()
    return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))


def sign_in(opener, base: str, user: str, password: str) -> None:
    page = opener.open(f"{base}/login/", timeout=30).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    if token is None:
        raise SystemExit("no CSRF token on the sign-in page")
    data = urllib.parse.urlencode(
        {"username": user, "password": password, "csrfmiddlewaretoken": token.group(1)}
    ).encode()
    request = urllib.request.Request(
        f"{base}/login/", data=data, headers={"Referer": f"{base}/login/"}
    )
    landed = opener.open(request, timeout=30)
    if "/login/" in landed.geturl():
        raise SystemExit(f"sign-in as {user} failed")


def probe(opener, base: str, paths: list[str], duration: float, interval: float) -> dict:
    times: dict[str, list[float]] = {path: [] for path in paths}
    slow: list[tuple[float, str, float, str]] = []
    began = time.monotonic()
    tick = 0
    while time.monotonic() - began < duration:
        path = paths[tick % len(paths)]
        start = time.monotonic()
        with opener.open(base + path, timeout=60) as response:
            response.read()
            if response.status != 200:
                raise SystemExit(f"{path}: HTTP {response.status}")
        took = time.monotonic() - start
        times[path].append(took)
        if took > SLOW:  # with the wall-clock time, to match against the demo's logs
            slow.append((start - began, path, took, time.strftime("%H:%M:%S", time.gmtime())))
        tick += 1
        time.sleep(max(0.0, interval - (time.monotonic() - start)))
    return {"times": times, "slow": slow}


def report(result: dict) -> None:
    print(f"{'path':40} {'count':>5} {'median':>8} {'p95':>8} {'max':>8} {'>1s':>4}")
    for path, values in result["times"].items():
        ordered = sorted(values)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        print(
            f"{path:40} {len(values):5d} {statistics.median(values) * 1000:6.0f}ms "
            f"{p95 * 1000:6.0f}ms {ordered[-1] * 1000:6.0f}ms "
            f"{sum(v > SLOW for v in values):4d}"
        )
    for at, path, took, clock in result["slow"]:
        print(f"  slow: {path} at +{at:.0f}s ({clock} UTC) took {took:.2f}s")


def start_demo(port: int, scratch: Path, root: Path = ROOT) -> subprocess.Popen:
    env = {
        **os.environ,
        "PORT": str(port),
        "FAIRSHARE_VAR_DIR": str(scratch),
    }
    for name in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL"):
        env.pop(name, None)
    log = open(scratch / "demo.out", "w")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(
        ["bash", "scripts/demo.sh"],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the demo exited; see {scratch / 'demo.out'}")
        if "Press Ctrl-C to stop" in (scratch / "demo.out").read_text():
            return process
        time.sleep(1)
    raise SystemExit("the demo did not start in 10 minutes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", action="store_true", help="start scripts/demo.sh first")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--root",
        type=Path,
        default=ROOT,
        help="the checkout whose scripts/demo.sh --start runs (default: this one), e.g. a "
        "git worktree of an older commit, to measure before and after a change",
    )
    parser.add_argument("--base-url", default=None)
    parser.add_argument("--user", default="admin")
    parser.add_argument("--password", default=None, help="default: <user>-demo-pass")
    parser.add_argument("--path", action="append", default=None)
    parser.add_argument("--duration", type=float, default=180)
    parser.add_argument("--interval", type=float, default=3)
    parser.add_argument("--warmup", type=float, default=20)
    args = parser.parse_args(argv)
    paths = args.path or ["/"]
    base = (args.base_url or f"http://127.0.0.1:{args.port}").rstrip("/")
    process = None
    scratch = None
    try:
        if args.start:
            scratch = Path(tempfile.mkdtemp(prefix="fairshare-probe-"))
            print(f"starting the demo on port {args.port} in {scratch} ...", flush=True)
            began = time.monotonic()
            process = start_demo(args.port, scratch, args.root)
            print(f"demo up after {time.monotonic() - began:.0f}s; warm-up {args.warmup:.0f}s")
            time.sleep(args.warmup)
        opener = _opener()
        sign_in(opener, base, args.user, args.password or f"{args.user}-demo-pass")
        print(
            f"probing {', '.join(paths)} as {args.user} every {args.interval:g}s "
            f"for {args.duration:g}s",
            flush=True,
        )
        result = probe(opener, base, paths, args.duration, args.interval)
        report(result)
        return 1 if result["slow"] else 0
    finally:
        if process is not None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
