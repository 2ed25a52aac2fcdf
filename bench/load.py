"""A bounded, scripted load test of the whole web app under gunicorn, on loopback.

Usage::

    .venv/bin/python bench/load.py [--users 200] [--duration 300] [--teams 1000]
                                   [--think 1.0] [--workers 2] [--threads 1] [--skip-seed]

1. (Re)creates the scratch database ``fairshare_bench_load`` (``psql -h 127.0.0.1 -U postgres``;
   its own, other benchmarks use other ``fairshare_bench*`` databases), migrates it and seeds
   ``--teams`` teams in departments of 20, each with a namespace, a GPU quota (guarantee 2,
   limit 10), a lead and a member; 20 admins; a capacity of 20,000 GPUs; 300 pending requests;
   one share computation. Users get no usable password: the load generator signs them in with
   sessions created here (PBKDF2 with 10^6 iterations would otherwise make sign-in the whole
   benchmark), plus bearer tokens for API readers and approvers.
2. Starts ``gunicorn config.wsgi`` (``--workers``, sync workers unless ``--threads`` > 1) on a
   free port of 127.0.0.1, with production settings (DEBUG off, JSON logs to a file, default
   API throttles), Celery publishing to Redis db ``--redis-db`` (nobody consumes it; the queued
   messages are counted and deleted at the end).
3. Runs ``--users`` virtual users for ``--duration`` seconds (ramped up over the first 10 s).
   Each repeatedly picks a kind of request (weights in ``MIX``), sends it with a fresh
   ``http.client`` connection, records status and latency, and thinks for an exponentially
   distributed time with mean ``--think`` seconds (0 = closed loop, as fast as possible).
4. Prints throughput, p50/p95/p99/max per kind, 4xx and 5xx counts, transport errors, the
   server's logged 5xx, and whether the targets hold (zero 5xx, p95 < 500 ms per kind).

Every request is bounded (30 s timeout); the run is bounded by ``--duration``; gunicorn is
stopped (its process group, which this script started) at the end, even on Ctrl-C.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import string
import subprocess
import sys
import threading
import time
import urllib.parse
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DB = "fairshare_bench_load"
SECRET_KEY = "bench-load-not-secret-" + "x" * 40  # sessions are signed with it: same for both
ENV = {
    "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DB}",
    "SECRET_KEY": SECRET_KEY,
    "FAIRSHARE_DEBUG": "false",
    "FAIRSHARE_CLUSTER": "disabled",
    "FAIRSHARE_SECURE_COOKIES": "false",
    "FAIRSHARE_LOG_LEVEL": "WARNING",
    "FAIRSHARE_LOG_FORMAT": "json",
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "DJANGO_SETTINGS_MODULE": "config.settings",
}
GPU = "nvidia.com/gpu"
DEPARTMENT_SIZE = 20
ADMINS = 20
PENDING = 300
TIMEOUT = 30.0
# kind → weight. Leads browse and submit, admins approve, integrations read the API.
MIX = {
    "dashboard": 22,
    "team_page": 14,
    "request_list": 5,
    "submit_request": 10,
    "approval_queue": 4,
    "approve": 8,
    "api_teams": 10,
    "api_quotas": 8,
    "api_shares": 5,
    "api_requests": 6,
    "api_chargeback": 3,
    "dashboard_admin": 2,
}


# ------------------------------------------------------------------ setup


def psql(sql: str) -> None:
    subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql],
        check=True,
    )


def recreate_database() -> None:
    psql(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    psql(f"CREATE DATABASE {DB}")


def django_setup(redis_url: str) -> None:
    os.environ.update(ENV, CELERY_BROKER_URL=redis_url)
    import django

    django.setup()


@dataclass
class Seed:
    teams: list[str]
    lead_sessions: dict[str, str]  # team slug → session key of its lead
    admin_sessions: list[str]
    admin_tokens: list[str]
    reader_tokens: list[str]


def seed(n_teams: int, n_users: int) -> Seed:
    from decimal import Decimal

    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import Group, User
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.management import call_command
    from django.db import transaction
    from django.utils import timezone

    from monitoring.models import CapacitySnapshot
    from quotas.choices import MembershipRole
    from quotas.decisions import submit_request
    from quotas.lines import LineInput
    from quotas.models import ApiToken, Membership, Namespace, PriorityTier, Team, TeamQuota
    from quotas.tokens import issue_token

    call_command("migrate", verbosity=0)
    rng = random.Random(7)
    with transaction.atomic():
        tier = PriorityTier.objects.create(name="experiment", value=100000)
        departments = Team.objects.bulk_create(
            Team(slug=f"dept-{d:03d}", name=f"Department {d}", tier=tier, weight=2)
            for d in range(max(1, n_teams // DEPARTMENT_SIZE))
        )
        teams = Team.objects.bulk_create(
            Team(
                slug=f"team-{i:04d}",
                name=f"Team {i}",
                parent=departments[i // DEPARTMENT_SIZE % len(departments)],
                tier=tier,
                weight=rng.randint(1, 5),
                cost_center=f"CC-{i % 37:02d}",
            )
            for i in range(n_teams)
        )
        Namespace.objects.bulk_create(Namespace(name=f"{t.slug}-ml", team=t) for t in teams)
        TeamQuota.objects.bulk_create(
            TeamQuota(team=t, resource=GPU, guarantee=Decimal(2), limit=Decimal(10)) for t in teams
        )
        unusable = "!bench"
        User.objects.bulk_create(
            [User(username=f"lead-{t.slug}", password=unusable) for t in teams]
            + [User(username=f"member-{t.slug}", password=unusable) for t in teams]
            + [User(username=f"admin-{a}", password=unusable, is_staff=True) for a in range(ADMINS)]
        )
        users = {u.username: u for u in User.objects.all()}
        Membership.objects.bulk_create(
            [
                Membership(user=users[f"lead-{t.slug}"], team=t, role=MembershipRole.LEAD)
                for t in teams
            ]
            + [
                Membership(user=users[f"member-{t.slug}"], team=t, role=MembershipRole.MEMBER)
                for t in teams
            ]
        )
        admins = [users[f"admin-{a}"] for a in range(ADMINS)]
        Group.objects.get_or_create(name="admins")[0].user_set.add(*admins)
        CapacitySnapshot.objects.create(
            taken_at=timezone.now(),
            source="bench",
            resources={GPU: "20000", "cpu": "200000", "memory": str(800 * 2**40)},
            nodes=2500,
        )

    def session_for(user) -> str:
        store = SessionStore()
        store[SESSION_KEY] = str(user.pk)
        store[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
        store[HASH_SESSION_KEY] = user.get_session_auth_hash()
        store.create()
        return store.session_key

    for team in rng.sample(teams, min(PENDING, len(teams))):
        submit_request(
            team=team,
            requester=users[f"lead-{team.slug}"],
            lines=[LineInput(GPU, str(rng.randint(3, 6)), "20")],
            justification="Seeded for the load test.",
        )
    active = rng.sample(teams, min(n_users, len(teams)))
    result = Seed(
        teams=[t.slug for t in teams],
        lead_sessions={t.slug: session_for(users[f"lead-{t.slug}"]) for t in active},
        admin_sessions=[session_for(a) for a in admins],
        admin_tokens=[issue_token(owner=a, name="bench").raw for a in admins],
        reader_tokens=[
            issue_token(
                owner=admins[i % ADMINS],
                name=f"reader-{i}",
                kind=ApiToken.Kind.SERVICE,
                scopes=["read:all"],
            ).raw
            for i in range(max(10, n_users // 5))
        ],
    )
    try:
        from scheduling.services import compute_shares

        compute_shares(trigger="bench")
    except Exception as e:  # the dashboards work without shares, just show less
        print(f"note: no share computation ({type(e).__name__}: {e})")
    return result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gunicorn(port: int, workers: int, threads: int, redis_url: str, log: Path):
    env = dict(os.environ, **ENV, CELERY_BROKER_URL=redis_url)
    command = [
        str(ROOT / ".venv" / "bin" / "gunicorn"),
        "config.wsgi",
        f"--workers={workers}",
        f"--bind=127.0.0.1:{port}",
        "--timeout=120",
        "--backlog=2048",
        "--log-level=warning",
    ]
    if threads > 1:
        command.append(f"--threads={threads}")
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                return process
        except OSError:
            time.sleep(0.2)
    stop(process)
    raise SystemExit(f"gunicorn did not start; see {log}")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


# ------------------------------------------------------------------ the virtual users


@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: dict[str, dict[int, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )
    errors: dict[str, dict[str, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, kind: str, seconds: float, status: int | None, error: str = "") -> None:
        with self.lock:
            if status is None:
                self.errors[kind][error] += 1
            else:
                self.latencies[kind].append(seconds)
                self.statuses[kind][status] += 1


class VirtualUser:
    """One virtual user: a team lead's session, and shared admin/reader credentials."""

    def __init__(self, port: int, seed: Seed, slug: str, stats: Stats, rng: random.Random):
        self.port, self.seed, self.slug, self.stats, self.rng = port, seed, slug, stats, rng
        self.session = seed.lead_sessions[slug]
        self.csrf = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(32))

    def send(
        self,
        kind: str,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: dict | None = None,
    ) -> tuple[int | None, bytes]:
        started = time.perf_counter()
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as e:
            self.stats.record(kind, time.perf_counter() - started, None, type(e).__name__)
            return None, b""
        finally:
            connection.close()
        self.stats.record(kind, time.perf_counter() - started, response.status)
        return response.status, data

    def cookies(self, session: str) -> dict:
        return {"Cookie": f"sessionid={session}; csrftoken={self.csrf}"}

    def bearer(self, token: str) -> dict:
        return {"Authorization": f"Bearer {token}", "Accept": "application/json"}

    def act(self, kind: str) -> None:
        rng, seed = self.rng, self.seed
        if kind == "dashboard":
            self.send(kind, "GET", "/", headers=self.cookies(self.session))
        elif kind == "team_page":
            self.send(kind, "GET", f"/teams/{self.slug}/", headers=self.cookies(self.session))
        elif kind == "request_list":
            self.send(kind, "GET", "/requests/", headers=self.cookies(self.session))
        elif kind == "submit_request":
            form = {
                "csrfmiddlewaretoken": self.csrf,
                "lines-TOTAL_FORMS": "2",
                "lines-INITIAL_FORMS": "1",
                "lines-MIN_NUM_FORMS": "0",
                "lines-MAX_NUM_FORMS": "64",
                "lines-0-guarantee": str(rng.randint(3, 8)),
                "lines-0-limit": str(rng.choice([16, 24, 32])),
                "justification": "Load test: a bigger sweep.",
                "tz": "UTC",
            }
            headers = self.cookies(self.session) | {
                "Content-Type": "application/x-www-form-urlencoded"
            }
            self.send(
                kind,
                "POST",
                f"/teams/{self.slug}/requests/new/",
                body=urllib.parse.urlencode(form).encode(),
                headers=headers,
            )
        elif kind == "approval_queue":
            self.send(
                kind, "GET", "/approvals/", headers=self.cookies(rng.choice(seed.admin_sessions))
            )
        elif kind == "dashboard_admin":
            self.send(kind, "GET", "/", headers=self.cookies(rng.choice(seed.admin_sessions)))
        elif kind == "approve":
            token = rng.choice(seed.admin_tokens)
            status, data = self.send(
                "approve_list",
                "GET",
                "/api/v1/quota-requests/?status=pending&page_size=20&ordering=created",
                headers=self.bearer(token),
            )
            if status != 200:
                return
            pending = [r["id"] for r in json.loads(data)["results"]]
            if pending:
                self.send(
                    kind,
                    "POST",
                    f"/api/v1/quota-requests/{rng.choice(pending)}/approve/",
                    body=b'{"note": "load test"}',
                    headers=self.bearer(token) | {"Content-Type": "application/json"},
                )
        else:
            token = rng.choice(seed.reader_tokens)
            pages = max(1, -(-len(seed.teams) // 50))  # 50 rows a page
            path = {
                "api_teams": f"/api/v1/teams/?page_size=50&page={rng.randint(1, pages)}",
                "api_quotas": f"/api/v1/quotas/?team={rng.choice(seed.teams)}",
                "api_shares": f"/api/v1/share-snapshots/current/?page={rng.randint(1, pages)}",
                "api_requests": "/api/v1/quota-requests/?page_size=50",
                "api_chargeback": "/api/v1/chargeback/?start=2025-05-01&end=2025-06-01",
            }[kind]
            self.send(kind, "GET", path, headers=self.bearer(token))


def run_load(port: int, seed: Seed, users: int, duration: float, think: float) -> tuple:
    stats = Stats()
    kinds, weights = list(MIX), list(MIX.values())
    started = time.monotonic()
    deadline = started + duration
    ramp = min(10.0, duration / 4)
    slugs = list(seed.lead_sessions)

    def loop(index: int) -> None:
        rng = random.Random(index)
        user = VirtualUser(port, seed, slugs[index % len(slugs)], stats, rng)
        time.sleep(ramp * index / max(1, users))
        while time.monotonic() < deadline:
            user.act(rng.choices(kinds, weights)[0])
            if think > 0:
                time.sleep(min(rng.expovariate(1 / think), max(0.0, deadline - time.monotonic())))

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(users)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()) + TIMEOUT + 5)
    return stats, time.monotonic() - started


# ------------------------------------------------------------------ report


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * p / 100
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def report(stats: Stats, elapsed: float, server_errors: int) -> bool:
    kinds = sorted(set(stats.latencies) | set(stats.errors))
    total = sum(len(v) for v in stats.latencies.values())
    failed_transport = sum(sum(e.values()) for e in stats.errors.values())
    print(f"\n{total} responses in {elapsed:.1f} s = {total / elapsed:.1f} req/s")
    header = f"{'kind':<16}{'n':>7}{'2xx/3xx':>9}{'4xx':>6}{'5xx':>6}{'err':>5}"
    header += f"{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'max ms':>9}  target"
    print(header)
    ok_all = True
    every = []
    for kind in kinds:
        lat = [1000 * s for s in stats.latencies[kind]]
        every.extend(lat)
        statuses = stats.statuses[kind]
        good = sum(n for s, n in statuses.items() if s < 400)
        client = sum(n for s, n in statuses.items() if 400 <= s < 500)
        server = sum(n for s, n in statuses.items() if s >= 500)
        errors = sum(stats.errors[kind].values())
        p95 = percentile(lat, 95)
        ok = server == 0 and errors == 0 and p95 < 500
        ok_all &= ok
        print(
            f"{kind:<16}{len(lat):>7}{good:>9}{client:>6}{server:>6}{errors:>5}"
            f"{percentile(lat, 50):>9.0f}{p95:>9.0f}{percentile(lat, 99):>9.0f}"
            f"{max(lat, default=float('nan')):>9.0f}  {'ok' if ok else 'MISSED'}"
        )
        print(f"{'':<16}statuses: {dict(sorted(statuses.items()))}")
        if errors:
            print(f"{'':<16}transport errors: {dict(stats.errors[kind])}")
    print(
        f"{'all':<16}{len(every):>7}{'':>26}{percentile(every, 50):>9.0f}"
        f"{percentile(every, 95):>9.0f}{percentile(every, 99):>9.0f}"
        f"{max(every, default=float('nan')):>9.0f}"
    )
    print(f"transport errors: {failed_transport}; 5xx logged by the server: {server_errors}")
    print("targets (zero 5xx, p95 < 500 ms for every kind):", "MET" if ok_all else "NOT MET")
    return ok_all


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--duration", type=float, default=300.0, help="seconds")
    parser.add_argument("--teams", type=int, default=1000)
    parser.add_argument("--think", type=float, default=1.0, help="mean think time, seconds")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="> 1: gthread workers")
    parser.add_argument("--redis-db", type=int, default=11)
    parser.add_argument("--skip-seed", action="store_true", help="reuse the seeded database")
    args = parser.parse_args()
    if not 1 <= args.users <= 2000 or not 1 <= args.duration <= 3600:
        raise SystemExit("--users must be 1..2000 and --duration 1..3600 s")

    redis_url = f"redis://127.0.0.1:6379/{args.redis_db}"
    seed_file = ROOT / "var" / "bench-load-seed.json"
    if args.skip_seed and seed_file.exists():
        django_setup(redis_url)
        from django.core.management import call_command

        call_command("migrate", verbosity=0)  # the seeded database may predate a migration
        data = json.loads(seed_file.read_text())
        seeded = Seed(**data)
    else:
        recreate_database()
        django_setup(redis_url)
        started = time.monotonic()
        seeded = seed(args.teams, args.users)
        seed_file.parent.mkdir(exist_ok=True)
        seed_file.write_text(json.dumps(seeded.__dict__))
        print(f"seeded {args.teams} teams in {time.monotonic() - started:.1f} s")
    if len(seeded.lead_sessions) < min(args.users, args.teams):
        raise SystemExit("the seed has fewer signed-in leads than --users; seed again")

    port = free_port()
    log = ROOT / "var" / "bench-load-gunicorn.log"
    server = start_gunicorn(port, args.workers, args.threads, redis_url, log)
    print(
        f"gunicorn: {args.workers} worker(s) x {args.threads} thread(s) on 127.0.0.1:{port}; "
        f"{args.users} users for {args.duration:.0f} s, think {args.think} s; log {log}"
    )
    try:
        stats, elapsed = run_load(port, seeded, args.users, args.duration, args.think)
    finally:
        stop(server)
    server_errors = log.read_text(errors="replace").count("Internal Server Error")
    try:
        import redis

        client = redis.Redis.from_url(redis_url)
        queued = client.llen("celery")
        client.delete("celery")
        print(f"{queued} share/sync chains were queued for Celery (deleted; no worker ran)")
    except Exception as e:
        print(f"note: could not inspect the broker ({e})")
    report(stats, elapsed, server_errors)


if __name__ == "__main__":
    main()
