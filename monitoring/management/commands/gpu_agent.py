"""``manage.py gpu_agent ARGS``: run the GPU node agent (``monitoring.collectors.agent``).

Every argument goes to the agent unchanged (``manage.py gpu_agent --help`` shows them), and the
agent's exit code is the command's: 0 stopped normally, 1 ``--once`` could not deliver, 2 bad
arguments, token file or NVML unavailable. SIGTERM (what the kubelet sends when the DaemonSet's
pod stops) stops the agent like Ctrl-C: the current cycle is interrupted, the NVML session is
shut down, and the exit code is 0.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Sequence

from django.core.management.base import BaseCommand, CommandError

from monitoring.collectors import agent


def _stop(signum, frame):
    raise KeyboardInterrupt


def run_agent(argv: Sequence[str], **seams) -> int:
    """Run the agent with SIGTERM turned into a clean stop; return its exit code.

    ``seams`` (``nvml``, ``post``, ``resolver``) are passed to ``agent.main`` for tests.
    """
    logging.getLogger("monitoring").setLevel(logging.INFO)
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        return agent.main(list(argv), **seams)
    finally:
        signal.signal(signal.SIGTERM, previous)


class Command(BaseCommand):
    help = "Run the GPU node agent: read NVML and post samples (arguments: see --help)."

    def add_arguments(self, parser):
        parser.add_argument("agent_args", nargs="*", help="arguments for the agent")

    def run_from_argv(self, argv):
        # Hand everything after the command name to the agent's own parser, so its options
        # (--api, --token-file, ...) are not mistaken for Django's.
        sys.exit(run_agent(argv[2:]))

    def handle(self, *args, agent_args=(), **options):
        code = run_agent([*args, *agent_args])
        if code:
            raise CommandError(f"gpu agent exited with status {code}", returncode=code)
