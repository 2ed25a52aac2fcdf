"""Benchmark convergence: approve → applied, a burst of approvals, hand edit → repaired, and the
first and steady full syncs — with a real Celery worker on Redis against the fake API server.

Usage (a scratch PostgreSQL database whose name contains "bench"; the script migrates and
*flushes* it, and refuses any other database; the Redis database of CELERY_BROKER_URL is
flushed too, so give it one of its own):

    psql -h 127.0.0.1 -U postgres -c 'CREATE DATABASE fairshare_bench'
    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/fairshare_bench
    export CELERY_BROKER_URL=redis://127.0.0.1:6379/10
    .venv/bin/python bench/convergence.py --scale demo
    .venv/bin/python bench/convergence.py --scale 200       # 200 teams / 2,000 namespaces
    .venv/bin/python bench/convergence.py --scale 200 --syncs-only   # the two full syncs alone
    .venv/bin/python bench/convergence.py --scale 200 --tls          # over HTTPS
    .venv/bin/python bench/convergence.py --scale demo --scheduler kueue   # the Kueue backend

What it does:

1. fills the database: ``--scale demo`` runs ``manage.py seed_demo``; ``--scale N`` builds
   bench/sync.py's tenancy (N teams, 10·N namespaces; its departments make the share
   computation fail, which must not hold quotas back);
2. starts the fake Kubernetes API server in a process of its own (``--server process``, the
   default: like a real API server, its CPU and its threads are not this process's; ``--server
   thread`` runs it in this process as the tests do) and runs the **first full sync** in-process
   (everything is created, ``FAIRSHARE_SYNC_WORKERS`` writes at a time), then a **steady full
   sync** (must write nothing); requests are counted from the fake's ``/metrics``;
3. starts ``celery -A config worker --concurrency 2`` (a subprocess on the same database,
   broker and fake API server) and the drift watcher (``DriftWatcher``, what
   ``manage.py watch_cluster`` runs) in a thread;
4. **approve → applied**: after ``--warmup`` untimed approvals (each worker process's first task
   imports and connects once), ``--approvals`` times, a lead's request for one more GPU of limit is
   approved with ``approve_request()``; the timer starts when it returns and stops when the
   team's ResourceQuotas in the fake API server add up to the new limit; p50/p95/max;
5. **burst**: ``--burst`` approvals for as many teams within one second; the time until every
   one is applied (none may be dropped);
6. **hand edit → repaired**: a team's ResourceQuota is patched over HTTP to 1 GPU; the time
   until the watcher's targeted sync has put the rendered amount back.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")
os.environ.setdefault("FAIRSHARE_LOG_LEVEL", "WARNING")
os.environ.setdefault("EMAIL_BACKEND", "django.core.mail.backends.locmem.EmailBackend")

# --scheduler volcano|kueue (FAIRSHARE_SCHEDULER) must be set before the settings load, for this
# process and the worker it starts alike.
for _i, _arg in enumerate(sys.argv):
    if _arg.startswith("--scheduler"):
        _value = _arg.partition("=")[2] or (sys.argv[_i + 1] if _i + 1 < len(sys.argv) else "")
        os.environ["FAIRSHARE_SCHEDULER"] = _value

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import Group, User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench.sync import fresh_database, populate  # noqa: E402
from kube.client import build_api_client, kind_info, request_json  # noqa: E402
from kube.errors import K8sNotFound  # noqa: E402
from monitoring.models import CapacitySnapshot  # noqa: E402
from quotas.decisions import approve_request, submit_request  # noqa: E402
from quotas.lines import LineInput  # noqa: E402
from quotas.models import Membership, Namespace, Team, TeamQuota  # noqa: E402
from scheduling.choices import SyncStatus  # noqa: E402
from scheduling.domain.render import LABEL_TEAM  # noqa: E402
from scheduling.models import SyncRun  # noqa: E402
from scheduling.sync import create_run, run_sync  # noqa: E402
from scheduling.watch import DriftWatcher  # noqa: E402
from tests.kubeapi.server import FakeKubeApi  # noqa: E402

GPU = "nvidia.com/gpu"
POLL = 0.01  # seconds between two looks at the fake API server
KEY = f"requests.{GPU}"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


class RemoteFake:
    """The fake API server in a process of its own (``python -m tests.kubeapi``), as a real API
    server is: its CPU is not this process's, and its threads do not share this interpreter's
    lock with the sync's writers. Read over HTTP; requests are counted from its ``/metrics``."""

    def __init__(self, *, tls: bool = False) -> None:
        scratch = Path(tempfile.mkdtemp(prefix="fake-kube-"))
        self.kubeconfig_path = str(scratch / "kubeconfig")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.kubeapi", "--kubeconfig", self.kubeconfig_path]
            + (["--tls", str(scratch / "pki")] if tls else []),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.process.stdout.readline()  # "fake Kubernetes API server at URL"
        self.process.stdout.readline()  # "kubeconfig: PATH"
        self.client = build_api_client("kubeconfig", kubeconfig=self.kubeconfig_path, timeout=60)
        self.baseline: Counter = Counter()

    def _metrics(self) -> Counter:
        response = self.client.call_api("GET", self.client.configuration.host + "/metrics")
        counts: Counter = Counter()
        for line in response.read().decode().splitlines():
            if line.startswith("apiserver_request_total{"):
                labels, value = line[len("apiserver_request_total{") :].split("} ")
                parts = dict(item.split("=", 1) for item in labels.split(","))
                counts[(parts["verb"].strip('"').lower(), parts["kind"].strip('"'))] += int(value)
        return counts

    @property
    def counts(self) -> Counter:
        return self._metrics() - self.baseline

    def reset_counts(self) -> None:
        self.baseline = self._metrics()

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        try:
            return request_json(self.client, "GET", kind_info(kind).path(namespace, name))
        except K8sNotFound:
            return None

    def api_client(self):
        return build_api_client("kubeconfig", kubeconfig=self.kubeconfig_path, timeout=60)

    def close(self) -> None:
        self.client.close()
        self.process.terminate()
        self.process.wait(timeout=10)


def writes(counts: Counter) -> int:
    return sum(n for (verb, _), n in counts.items() if verb not in ("get", "list", "watch"))


def full_sync(api_client, server: FakeKubeApi, title: str) -> None:
    server.reset_counts()
    started = time.perf_counter()
    run = run_sync(create_run(trigger="bench").pk, api_client=api_client)
    elapsed = time.perf_counter() - started
    counts = Counter(server.counts)
    summary = run.log.splitlines()[-1] if run.log else ""
    phases = summary[summary.rindex("(") + 1 : -1] if summary.endswith(")") else ""
    print(
        f"{title}: {elapsed:.2f} s ({run.status}; {run.total} objects: {run.created_count} "
        f"created, {run.updated_count} updated, {run.unchanged_count} unchanged; "
        f"{sum(counts.values())} requests, {writes(counts)} writes; {phases})"
    )


def team_gpus(server, namespaces: list[str], team: str) -> Decimal:
    total = Decimal(0)
    if isinstance(server, RemoteFake):
        # One LIST by label instead of a GET per namespace: the poll stays light.
        page = request_json(
            server.client,
            "GET",
            kind_info("ResourceQuota").path(),
            query={"labelSelector": f"{LABEL_TEAM}={team}"},
        )
        quotas = [q for q in page["items"] if q["metadata"]["name"] == "fairshare"]
    else:
        quotas = [server.get("ResourceQuota", "fairshare", name) for name in namespaces]
    for quota in quotas:
        if quota is not None:
            total += Decimal(quota["spec"]["hard"].get(KEY, "0"))
    return total


def wait_for(predicate, timeout: float) -> float | None:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if predicate():
            return time.perf_counter() - started
        time.sleep(POLL)
    return None


class Approvals:
    """Submit-and-approve one more GPU of limit for a team; remember what to wait for."""

    def __init__(self, server: FakeKubeApi) -> None:
        self.server = server
        self.admin = User.objects.create_user("bench-admin", is_staff=True)
        self.admin.groups.add(Group.objects.get_or_create(name="admins")[0])
        self.namespaces: dict[int, list[str]] = {}
        self.leads: dict[int, User] = {}

    def lead(self, team: Team) -> User:
        if team.pk not in self.leads:
            user = User.objects.create_user(f"bench-lead-{team.slug}")
            Membership.objects.create(user=user, team=team, role="lead")
            self.leads[team.pk] = user
            self.namespaces[team.pk] = list(
                Namespace.objects.filter(team=team, managed=True).values_list("name", flat=True)
            )
        return self.leads[team.pk]

    def submit(self, team: Team) -> tuple[int, Decimal]:
        """A lead's request for limit + 1 GPU; return (request id, new limit)."""
        lead = self.lead(team)
        row = TeamQuota.objects.get(team=team, resource=GPU)
        new_limit = (row.limit or Decimal(0)) + 1
        request = submit_request(
            team=team,
            requester=lead,
            lines=[LineInput(GPU, str(row.guarantee), str(new_limit))],
            justification="bench",
        )
        return request.pk, new_limit

    def approve(self, request_id: int) -> None:
        approve_request(request_id, approver=self.admin)

    def applied(self, team: Team, limit: Decimal) -> bool:
        return team_gpus(self.server, self.namespaces[team.pk], team.slug) == limit


def start_worker(server: FakeKubeApi) -> subprocess.Popen:
    env = dict(
        os.environ,
        FAIRSHARE_CLUSTER=f"kubeconfig:{server.kubeconfig_path}",
        FAIRSHARE_LOG_LEVEL="WARNING",
    )
    return subprocess.Popen(
        [
            str(ROOT / ".venv" / "bin" / "celery"),
            "-A",
            "config",
            "worker",
            "--concurrency=2",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
            "--loglevel=WARNING",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="demo", help="'demo' or a number of teams")
    parser.add_argument("--approvals", type=int, default=20)
    parser.add_argument("--burst", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2, help="approvals before the timed ones")
    parser.add_argument("--edits", type=int, default=5)
    parser.add_argument(
        "--server",
        choices=("process", "thread"),
        default="process",
        help="the fake API server in a process of its own (default) or in a thread of this one",
    )
    parser.add_argument(
        "--tls",
        action="store_true",
        help="the fake serves HTTPS (a fresh CA; with --server process only)",
    )
    parser.add_argument(
        "--scheduler",
        choices=("volcano", "kueue"),
        default="volcano",
        help="the backend whose objects the syncs write (FAIRSHARE_SCHEDULER)",
    )
    parser.add_argument(
        "--syncs-only",
        action="store_true",
        help="only the first and the steady full sync (no worker, approvals or edits)",
    )
    args = parser.parse_args(argv)
    broker = str(settings.CELERY_BROKER_URL)
    if not broker.startswith("redis://"):
        sys.exit("CELERY_BROKER_URL must be a redis:// URL (a database of its own: it is flushed)")
    print(
        f"database: {settings.DATABASES['default']['NAME']}; broker: {broker}; "
        f"scheduler: {settings.FAIRSHARE_SCHEDULER}"
    )
    fresh_database()
    import redis

    redis.Redis.from_url(broker).flushdb()
    if args.scale == "demo":
        call_command("seed_demo", quiet=True)
    else:
        teams = int(args.scale)
        populate(teams, teams * 10)
    CapacitySnapshot.objects.create(
        taken_at=timezone.now(),
        source="bench",
        resources={GPU: "100000", "cpu": "10000000", "memory": str(2**50)},
        nodes=1000,
    )
    print(f"{Team.objects.count()} teams, {Namespace.objects.count()} namespaces")

    if args.server == "process":
        server = RemoteFake(tls=args.tls)
    else:
        server = FakeKubeApi().start()
        server.reset()
    os.environ["FAIRSHARE_CLUSTER"] = f"kubeconfig:{server.kubeconfig_path}"
    settings.FAIRSHARE_CLUSTER = os.environ["FAIRSHARE_CLUSTER"]
    api_client = build_api_client("kubeconfig", kubeconfig=server.kubeconfig_path, timeout=60)
    worker = None
    stop = threading.Event()
    try:
        full_sync(api_client, server, "first full sync")
        full_sync(api_client, server, "steady full sync")
        if args.syncs_only:
            return 0

        worker = start_worker(server)
        probe = create_run(trigger="bench-warmup")
        from scheduling.tasks import sync_cluster

        sync_cluster.delay(run_id=probe.pk)
        if wait_for(lambda: SyncRun.objects.get(pk=probe.pk).is_finished, 120) is None:
            sys.exit("the worker did not run the warm-up sync")
        watcher = DriftWatcher(api_client, interval=0.5)
        watching = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
        watching.start()
        wait_for(lambda: all(r.lists for r in watcher.reflectors), 60)

        approvals = Approvals(server)
        leaves = list(
            Team.objects.filter(children__isnull=True, quotas__resource=GPU)
            .filter(namespaces__managed=True)
            .distinct()
            .order_by("slug")
        )
        # Warm-up approvals, not counted: each worker process's first task imports and connects
        # (about 0.7 s once), which a long-running worker has long done.
        for i in range(args.warmup):
            team = leaves[-1 - i]
            request_id, limit = approvals.submit(team)
            approvals.approve(request_id)
            took = wait_for(lambda team=team, limit=limit: approvals.applied(team, limit), 30)
            print(f"warm-up approval {i + 1}: {took if took is None else round(took, 3)} s")
            time.sleep(0.3)
        latencies: list[float] = []
        for i in range(args.approvals):
            team = leaves[i % len(leaves)]
            request_id, limit = approvals.submit(team)
            approvals.approve(request_id)  # the timer starts when it returns
            took = wait_for(lambda team=team, limit=limit: approvals.applied(team, limit), 30)
            if took is None:
                sys.exit(f"approval {i} for {team.slug} was not applied within 30 s")
            latencies.append(took)
            time.sleep(0.3)
        print(
            f"approve → applied ({args.approvals} approvals, one at a time): "
            f"p50 {statistics.median(latencies):.3f} s, p95 {pct(latencies, 95):.3f} s, "
            f"max {max(latencies):.3f} s"
        )

        burst_teams = leaves[: args.burst]
        pending = [(team, *approvals.submit(team)) for team in burst_teams]
        time.sleep(1.0)
        started = time.perf_counter()
        wanted = []
        for team, request_id, limit in pending:
            approvals.approve(request_id)
            wanted.append((team, limit))
        submitted = time.perf_counter() - started
        done = wait_for(lambda: all(approvals.applied(t, lim) for t, lim in wanted), 30)
        missing = [t.slug for t, lim in wanted if not approvals.applied(t, lim)]
        total = None if done is None else submitted + done
        print(
            f"burst of {len(wanted)} approvals in {submitted:.2f} s: "
            + (f"all applied {total:.2f} s after the first" if total else f"MISSING {missing}")
        )
        time.sleep(1.0)

        from kubernetes.client import CoreV1Api

        human = CoreV1Api(server.api_client())
        repairs: list[float] = []
        for i in range(args.edits):
            team = leaves[(i * 7) % len(leaves)]
            approvals.lead(team)
            namespace = approvals.namespaces[team.pk][0]
            before = server.get("ResourceQuota", "fairshare", namespace)["spec"]["hard"][KEY]
            human.patch_namespaced_resource_quota(
                "fairshare", namespace, {"spec": {"hard": {KEY: "1" if before != "1" else "2"}}}
            )
            took = wait_for(
                lambda ns=namespace, want=before: (
                    server.get("ResourceQuota", "fairshare", ns)["spec"]["hard"][KEY] == want
                ),
                30,
            )
            if took is None:
                sys.exit(f"hand edit of {namespace} was not repaired within 30 s")
            repairs.append(took)
            time.sleep(1.0)
        print(
            f"hand edit → repaired ({args.edits} edits): p50 {statistics.median(repairs):.3f} s, "
            f"max {max(repairs):.3f} s"
        )
        stop.set()
        watching.join(timeout=10)
        wait_for(
            lambda: (
                not SyncRun.objects.filter(
                    status__in=[SyncStatus.QUEUED, SyncStatus.RUNNING]
                ).exists()
            ),
            60,
        )
        statuses = Counter(SyncRun.objects.values_list("status", flat=True))
        print(f"sync runs: {dict(statuses)}")
        full_sync(api_client, server, "steady full sync after all that")
    finally:
        stop.set()
        if worker is not None:
            worker.terminate()
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                worker.kill()
        api_client.close()
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
