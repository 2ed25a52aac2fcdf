"""GPU node agent: read NVML every ``interval`` seconds and POST the samples to the API.

Runs as a DaemonSet on GPU nodes (``python manage.py gpu_agent``, which calls :func:`main`), with
``hostPID: true`` so that NVML's process IDs can be mapped to pods. No Django import here.

Each cycle:

1. Read every GPU (:func:`monitoring.collectors.nvml.read_all`). A transient NVML error skips
   that GPU's sample and adds one to ``skipped_samples``; NvmlUnavailable stops the agent.
2. Resolve each process's pod UID to namespace and name with the injected ``resolver``
   (default: none, only the UID is sent).
3. Queue the samples as one batch.
4. POST queued batches oldest first. A :class:`PostError` (connection error, timeout, 429,
   5xx) stops the flush; what is left is retried next cycle. A :class:`PostRejected` (any
   other 4xx, e.g. 401 for a revoked token) drops that batch, counts its samples as dropped,
   logs an error, and the flush goes on.
5. If more than ``buffer_size`` batches are left, drop the oldest ones, add their samples to
   ``dropped_samples`` and log a warning.

Batch format (JSON, ``Content-Type: application/json``, ``Authorization: Bearer <token>``)::

    {
      "node": "gpu-node-1",
      "agent": {"version": "0.1.0", "dropped_samples": 0, "skipped_samples": 0},
      "samples": [
        {"ts": "2025-05-01T12:00:00+00:00",      # ISO 8601, UTC, when the GPU was read
         "uuid": "GPU-8c0f...", "index": 0, "model": "NVIDIA H100 80GB HBM3",
         "util_gpu": 87, "util_mem": 40,          # percent; null if unsupported (e.g. MIG)
         "mem_used": 53687091200, "mem_total": 85899345920,   # bytes
         "power_w": 612.5, "temp_c": 64,          # null if unsupported
         "processes": [{"pid": 4242, "pod_uid": "0b6c...", "namespace": "team-a",
                        "pod": "train-0", "mem_used": 53687091200}]}
      ]
    }

``processes[].pod_uid``/``namespace``/``pod`` are null for processes outside a pod or not
resolved; ``mem_used`` is null where NVML cannot tell. ``dropped_samples`` and
``skipped_samples`` are cumulative since the agent started and are taken when the batch is
sent, so every batch after a loss reports it. A batch may have no samples (a node without
GPUs, or every GPU skipped); it is sent anyway as a heartbeat carrying the counters.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from http.client import HTTPException
from pathlib import Path
from typing import Any

from monitoring.collectors.nvml import GpuProcess, GpuReading, nvml_session, read_all
from monitoring.exceptions import NvmlReadError, NvmlUnavailable, PostError, PostRejected

logger = logging.getLogger(__name__)

AGENT_VERSION = "0.1.0"
DEFAULT_INTERVAL = 15.0
# One hour of batches at the default interval.
DEFAULT_BUFFER_SIZE = 240
DEFAULT_TIMEOUT = 10.0
_MAX_LOGGED_BODY = 200

Batch = dict[str, Any]
Post = Callable[[Batch], None]


@dataclass(frozen=True)
class PodRef:
    """Where a pod UID lives: what a resolver returns."""

    namespace: str
    name: str


Resolver = Callable[[str], PodRef | None]


@dataclass(frozen=True)
class CycleReport:
    """What one cycle did: samples read and skipped, batches posted/rejected, batches pending."""

    samples: int
    skipped: int
    posted: int
    rejected: int
    pending: int


@dataclass
class _Pending:
    samples: list[dict[str, Any]]


class HttpPoster:
    """POST a batch as JSON with a bearer token, using urllib.

    Raises PostError on connection errors, timeouts, 429 and 5xx; PostRejected on other
    4xx (and any other non-2xx answer).
    """

    def __init__(self, url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT):
        self.url = url
        self.timeout = timeout
        self._token = token

    def __call__(self, batch: Batch) -> None:
        request = urllib.request.Request(
            self.url,
            data=json.dumps(batch).encode(),
            method="POST",
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {self._token}",
                "User-Agent": f"fairshare-gpu-agent/{AGENT_VERSION}",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                response.read()
        except urllib.error.HTTPError as e:
            body = e.read(_MAX_LOGGED_BODY).decode(errors="replace")
            message = f"POST {self.url} answered HTTP {e.code}: {body}"
            if e.code == 429 or e.code >= 500:
                raise PostError(message, status=e.code) from e
            raise PostRejected(message, status=e.code) from e
        except (urllib.error.URLError, HTTPException, OSError) as e:
            # URLError wraps refused connections and DNS failures; timeouts and resets
            # surface as OSError subclasses, malformed answers as HTTPException.
            raise PostError(f"POST {self.url} failed: {e}") from e


class Agent:
    """The node agent's loop; see the module docstring for what a cycle does.

    ``post(batch)`` sends one batch (default in :func:`main`: :class:`HttpPoster`),
    ``clock()`` returns an aware datetime, ``sleep(seconds)`` waits; all three are injected so
    tests run without a network or real time. ``buffer_size`` bounds the queue in batches.
    """

    def __init__(
        self,
        nvml: Any,
        *,
        node: str,
        post: Post,
        interval: float = DEFAULT_INTERVAL,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], None] = time.sleep,
        proc_root: str | Path = "/proc",
        resolver: Resolver | None = None,
    ):
        if interval <= 0:
            raise ValueError("interval must be positive")
        if buffer_size < 1:
            raise ValueError("buffer_size must be at least 1")
        self.nvml = nvml
        self.node = node
        self.interval = interval
        self.buffer_size = buffer_size
        self.dropped_samples = 0
        self.skipped_samples = 0
        self.rejected_batches = 0
        self._post = post
        self._clock = clock
        self._sleep = sleep
        self._proc_root = proc_root
        self._resolver = resolver
        self._pending: deque[_Pending] = deque()
        self._devices_seen = 0

    @property
    def pending_batches(self) -> int:
        return len(self._pending)

    def run(self, max_cycles: int | None = None) -> None:
        """Open an NVML session and run cycles every ``interval`` seconds.

        Runs forever unless ``max_cycles`` is given; does not sleep after the last cycle.
        Raises NvmlUnavailable if NVML is missing at start or becomes unusable.
        """
        with nvml_session(self.nvml) as nvml:
            done = 0
            while max_cycles is None or done < max_cycles:
                started = self._clock()
                self._cycle(nvml)
                done += 1
                if max_cycles is not None and done >= max_cycles:
                    break
                elapsed = (self._clock() - started).total_seconds()
                self._sleep(max(0.0, self.interval - elapsed))

    def run_once(self) -> CycleReport:
        """Open an NVML session, run one cycle, close the session and say what happened."""
        with nvml_session(self.nvml) as nvml:
            return self._cycle(nvml)

    def agent_section(self) -> dict[str, Any]:
        return {
            "version": AGENT_VERSION,
            "dropped_samples": self.dropped_samples,
            "skipped_samples": self.skipped_samples,
        }

    # ------------------------------------------------------------ one cycle

    def _cycle(self, nvml: Any) -> CycleReport:
        readings, skipped = self._read(nvml)
        self._enqueue([sample_to_json(r) for r in self._resolve(readings)])
        posted, rejected = self._flush()
        self._trim()
        return CycleReport(
            samples=len(readings),
            skipped=skipped,
            posted=posted,
            rejected=rejected,
            pending=len(self._pending),
        )

    def _read(self, nvml: Any) -> tuple[list[GpuReading], int]:
        skips: list[NvmlReadError] = []
        try:
            readings = read_all(
                nvml,
                node=self.node,
                now=self._clock(),
                proc_root=self._proc_root,
                on_skip=skips.append,
            )
        except NvmlReadError as e:
            # The device count itself failed: count the samples we would have taken.
            missed = max(1, self._devices_seen)
            logger.warning("skipped a cycle on %s (%d samples): %s", self.node, missed, e)
            self.skipped_samples += missed
            return [], missed
        self._devices_seen = len(readings) + len(skips)
        self.skipped_samples += len(skips)
        return readings, len(skips)

    def _resolve(self, readings: list[GpuReading]) -> list[GpuReading]:
        if self._resolver is None:
            return readings
        cache: dict[str, PodRef | None] = {}
        resolved = []
        for reading in readings:
            procs = tuple(self._resolve_process(p, cache) for p in reading.processes)
            resolved.append(replace(reading, processes=procs))
        return resolved

    def _resolve_process(self, proc: GpuProcess, cache: dict[str, PodRef | None]) -> GpuProcess:
        if proc.pod_uid is None:
            return proc
        if proc.pod_uid not in cache:
            try:
                cache[proc.pod_uid] = self._resolver(proc.pod_uid)  # type: ignore[misc]
            except Exception:
                # The resolver is injected I/O (kubelet or API); a failed lookup must not cost
                # the sample, which still carries the pod UID.
                logger.warning("cannot resolve pod %s", proc.pod_uid, exc_info=True)
                cache[proc.pod_uid] = None
        ref = cache[proc.pod_uid]
        return proc if ref is None else replace(proc, namespace=ref.namespace, pod=ref.name)

    def _enqueue(self, samples: list[dict[str, Any]]) -> None:
        # An empty batch is only a heartbeat: not worth a slot if batches are already waiting.
        if samples or not self._pending:
            self._pending.append(_Pending(samples))

    def _trim(self) -> None:
        """Drop the oldest batches beyond ``buffer_size``, counting and logging their samples.

        Runs after the flush, so a full buffer costs nothing when the API is back.
        """
        while len(self._pending) > self.buffer_size:
            oldest = self._pending.popleft()
            self.dropped_samples += len(oldest.samples)
            logger.warning(
                "buffer full (%d batches, API unreachable): dropped the oldest batch of %d "
                "samples; %d samples dropped since start",
                self.buffer_size,
                len(oldest.samples),
                self.dropped_samples,
            )

    def _flush(self) -> tuple[int, int]:
        posted = rejected = 0
        while self._pending:
            batch = {
                "node": self.node,
                "agent": self.agent_section(),
                "samples": self._pending[0].samples,
            }
            try:
                self._post(batch)
            except PostRejected as e:
                dropped = self._pending.popleft()
                self.dropped_samples += len(dropped.samples)
                self.rejected_batches += 1
                rejected += 1
                logger.error(
                    "API rejected a batch (HTTP %s), dropped its %d samples; %d samples dropped "
                    "since start: %s",
                    e.status,
                    len(dropped.samples),
                    self.dropped_samples,
                    e,
                )
            except PostError as e:
                logger.warning(
                    "cannot post to the API, %d batches kept for retry: %s", len(self._pending), e
                )
                break
            else:
                self._pending.popleft()
                posted += 1
        return posted, rejected


def sample_to_json(reading: GpuReading) -> dict[str, Any]:
    """Return one ``samples[]`` entry of the batch format for a reading."""
    return {
        "ts": reading.ts.isoformat(),
        "uuid": reading.uuid,
        "index": reading.index,
        "model": reading.model,
        "util_gpu": reading.util_gpu,
        "util_mem": reading.util_mem,
        "mem_used": reading.mem_used,
        "mem_total": reading.mem_total,
        "power_w": reading.power_w,
        "temp_c": reading.temp_c,
        "processes": [
            {
                "pid": p.pid,
                "pod_uid": p.pod_uid,
                "namespace": p.namespace,
                "pod": p.pod,
                "mem_used": p.used_memory,
            }
            for p in reading.processes
        ],
    }


# ---------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu_agent", description="Read NVML on this node and post GPU samples to Fairshare."
    )
    parser.add_argument("--api", required=True, help="URL of the GPU sample ingest endpoint")
    parser.add_argument(
        "--token-file", required=True, type=Path, help="file holding this node's API token"
    )
    parser.add_argument(
        "--node",
        default=os.environ.get("NODE_NAME") or socket.gethostname(),
        help="node name (default: $NODE_NAME, else the hostname)",
    )
    parser.add_argument("--interval", type=_positive_float, default=DEFAULT_INTERVAL)
    parser.add_argument(
        "--buffer-size",
        type=_positive_int,
        default=DEFAULT_BUFFER_SIZE,
        help="batches kept while the API is unreachable",
    )
    parser.add_argument("--timeout", type=_positive_float, default=DEFAULT_TIMEOUT)
    parser.add_argument("--proc-root", default="/proc", help="the host's /proc (default /proc)")
    parser.add_argument("--once", action="store_true", help="run one cycle and exit")
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    nvml: Any = None,
    post: Post | None = None,
    resolver: Resolver | None = None,
) -> int:
    """Run the agent from command-line arguments and return the exit code.

    0: stopped normally (or ``--once`` delivered its batch); 1: ``--once`` did not deliver it
    (API unreachable or refused it);
    2: bad arguments, unreadable or empty token file, or NVML unavailable (the reason is
    written to stderr). ``nvml``, ``post`` and ``resolver`` replace the real ones.
    """
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        # argparse has already printed usage and the error; hand back its code.
        return int(e.code or 0)
    try:
        token = args.token_file.read_text().strip()
    except OSError as e:
        sys.stderr.write(f"gpu_agent: cannot read token file {args.token_file}: {e}\n")
        return 2
    if not token:
        sys.stderr.write(f"gpu_agent: token file {args.token_file} is empty\n")
        return 2
    agent = Agent(
        nvml,
        node=args.node,
        post=post or HttpPoster(args.api, token, timeout=args.timeout),
        interval=args.interval,
        buffer_size=args.buffer_size,
        proc_root=args.proc_root,
        resolver=resolver,
    )
    logger.info("gpu agent %s starting on %s, posting to %s", AGENT_VERSION, args.node, args.api)
    try:
        if args.once:
            report = agent.run_once()
        else:
            agent.run()
            return 0
    except NvmlUnavailable as e:
        sys.stderr.write(f"gpu_agent: {e}\n")
        return 2
    except KeyboardInterrupt:
        logger.info("gpu agent stopped")
        return 0
    if report.pending or report.rejected:
        sys.stderr.write(f"gpu_agent: could not deliver the batch to {args.api}\n")
        return 1
    return 0


def _positive_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {text}")
    return value


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    sys.exit(main())
