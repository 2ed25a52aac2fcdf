import ctypes
import json
import logging
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from monitoring.collectors.agent import AGENT_VERSION, Agent, HttpPoster, PodRef, main
from monitoring.exceptions import NvmlUnavailable, PostError, PostRejected
from tests.fakes import FakeDevice, FakeNvml, GiB, pynvml

T0 = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
POD_A = "0b6c4a1e-2f3d-4c5b-8a9e-1f2e3d4c5b6a"


class Clock:
    """Advances one second every time it is read."""

    def __init__(self):
        self.now = T0 - timedelta(seconds=1)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


class Api:
    """A ``post`` double: records every batch and fails while ``error`` is set."""

    def __init__(self):
        self.batches: list[dict] = []
        self.attempts = 0
        self.error: Exception | None = None

    def __call__(self, batch: dict) -> None:
        self.attempts += 1
        if self.error is not None:
            raise self.error
        # Round-trip through JSON so the test sees exactly what goes on the wire.
        self.batches.append(json.loads(json.dumps(batch)))


def gpus(n: int = 2) -> FakeNvml:
    return FakeNvml([FakeDevice(uuid=f"GPU-{i}", util_gpu=10 * i) for i in range(n)])


def make_agent(nvml: FakeNvml, api: Api, **kwargs) -> Agent:
    kwargs.setdefault("clock", Clock())
    kwargs.setdefault("sleep", lambda seconds: None)
    return Agent(nvml, node="gpu-1", post=api, **kwargs)


def libnvidia_ml_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


# ---------------------------------------------------------------- the batch


def test_it_posts_a_batch_in_the_documented_format(tmp_path):
    (tmp_path / "100").mkdir()
    (tmp_path / "100" / "cgroup").write_text(f"0::/kubepods/besteffort/pod{POD_A}/c1\n")
    (tmp_path / "200").mkdir()
    (tmp_path / "200" / "cgroup").write_text("0::/system.slice/dcgm.service\n")
    nvml = FakeNvml(
        [
            FakeDevice(
                uuid="GPU-8c0f",
                util_gpu=87,
                util_mem=40,
                mem_used=50 * GiB,
                power_mw=612_500,
                temp_c=64,
                processes=[(100, 50 * GiB), (200, None)],
            )
        ]
    )
    api = Api()
    agent = make_agent(
        nvml, api, proc_root=tmp_path, resolver={POD_A: PodRef("team-a", "train-0")}.get
    )

    agent.run_once()

    assert api.batches == [
        {
            "node": "gpu-1",
            "agent": {"version": AGENT_VERSION, "dropped_samples": 0, "skipped_samples": 0},
            "samples": [
                {
                    "ts": "2025-05-01T12:00:00+00:00",
                    "uuid": "GPU-8c0f",
                    "index": 0,
                    "model": "NVIDIA H100 80GB HBM3",
                    "util_gpu": 87,
                    "util_mem": 40,
                    "mem_used": 50 * GiB,
                    "mem_total": 80 * GiB,
                    "power_w": 612.5,
                    "temp_c": 64,
                    "processes": [
                        {
                            "pid": 100,
                            "pod_uid": POD_A,
                            "namespace": "team-a",
                            "pod": "train-0",
                            "mem_used": 50 * GiB,
                        },
                        {
                            "pid": 200,
                            "pod_uid": None,
                            "namespace": None,
                            "pod": None,
                            "mem_used": None,
                        },
                    ],
                }
            ],
        }
    ]
    assert (nvml.initialized, nvml.shutdowns) == (0, 1)


def test_a_failing_resolver_still_sends_the_pod_uid(tmp_path, caplog):
    (tmp_path / "100").mkdir()
    (tmp_path / "100" / "cgroup").write_text(f"0::/kubepods/besteffort/pod{POD_A}/c1\n")
    api = Api()

    def resolver(uid):
        raise ConnectionError("kubelet down")

    agent = make_agent(
        FakeNvml([FakeDevice(uuid="GPU-0", processes=[(100, GiB)])]),
        api,
        proc_root=tmp_path,
        resolver=resolver,
    )

    agent.run_once()

    (proc,) = api.batches[0]["samples"][0]["processes"]
    assert (proc["pod_uid"], proc["namespace"], proc["pod"]) == (POD_A, None, None)
    assert f"cannot resolve pod {POD_A}" in caplog.text


def test_a_node_without_gpus_still_sends_a_heartbeat():
    api = Api()

    make_agent(FakeNvml([]), api).run_once()

    assert [b["samples"] for b in api.batches] == [[]]


# ---------------------------------------------------------------- API down


def test_it_keeps_batches_while_the_api_is_down_and_sends_them_oldest_first():
    api = Api()
    agent = make_agent(gpus(1), api)
    api.error = PostError("connection refused")

    for _ in range(3):
        report = agent.run_once()
    assert (report.posted, report.pending, api.batches) == (0, 3, [])

    api.error = None
    report = agent.run_once()

    assert (report.posted, report.pending) == (4, 0)
    stamps = [b["samples"][0]["ts"] for b in api.batches]
    assert stamps == sorted(stamps)
    assert len(set(stamps)) == 4
    assert agent.dropped_samples == 0


def test_it_tries_only_the_oldest_batch_while_the_api_is_down():
    api = Api()
    api.error = PostError("HTTP 503", status=503)
    agent = make_agent(gpus(1), api)

    for _ in range(5):
        agent.run_once()

    assert api.attempts == 5
    assert agent.pending_batches == 5


def test_it_drops_the_oldest_batch_when_the_buffer_is_full_and_reports_it(caplog):
    api = Api()
    api.error = PostError("connection refused")
    agent = make_agent(gpus(2), api, buffer_size=2)

    with caplog.at_level(logging.WARNING):
        for _ in range(4):
            agent.run_once()

    assert agent.pending_batches == 2
    assert agent.dropped_samples == 4
    assert "4 samples dropped since start" in caplog.text

    api.error = None
    agent.run_once()

    # One batch per cycle, one second apart: 12:00:00 and 12:00:01 are gone, the batch read
    # when the API came back does not cost another one, and every batch reports the loss.
    assert [b["samples"][0]["ts"][11:19] for b in api.batches] == [
        "12:00:02",
        "12:00:03",
        "12:00:04",
    ]
    assert [b["agent"]["dropped_samples"] for b in api.batches] == [4, 4, 4]


def test_it_drops_and_counts_a_batch_the_api_rejects(caplog):
    api = Api()
    api.error = PostRejected("POST answered HTTP 401: invalid token", status=401)
    agent = make_agent(gpus(2), api)

    report = agent.run_once()

    assert (report.rejected, report.pending) == (1, 0)
    assert (agent.dropped_samples, agent.rejected_batches) == (2, 1)
    assert "API rejected a batch (HTTP 401), dropped its 2 samples" in caplog.text

    api.error = None
    agent.run_once()

    assert api.attempts == 2
    assert [b["agent"]["dropped_samples"] for b in api.batches] == [2]


# ---------------------------------------------------------------- NVML errors


def test_a_lost_gpu_is_skipped_counted_and_the_agent_keeps_running():
    nvml = gpus(2)
    nvml.fail("nvmlDeviceGetUtilizationRates", pynvml.NVML_ERROR_GPU_IS_LOST, device=1, times=1)
    api = Api()
    agent = make_agent(nvml, api)

    agent.run(max_cycles=2)

    assert [[s["uuid"] for s in b["samples"]] for b in api.batches] == [
        ["GPU-0"],
        ["GPU-0", "GPU-1"],
    ]
    assert [b["agent"]["skipped_samples"] for b in api.batches] == [1, 1]


def test_a_failed_device_count_skips_the_cycle_and_counts_every_gpu():
    nvml = gpus(3)
    api = Api()
    agent = make_agent(nvml, api)
    agent.run_once()
    nvml.fail("nvmlDeviceGetCount", pynvml.NVML_ERROR_TIMEOUT, times=1)

    report = agent.run_once()

    assert (report.samples, report.skipped) == (0, 3)
    assert api.batches[-1]["agent"]["skipped_samples"] == 3


def test_it_raises_nvml_unavailable_when_nvml_is_missing_at_start():
    nvml = gpus(1)
    nvml.fail("nvmlInit", pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    api = Api()

    with pytest.raises(NvmlUnavailable, match="driver is not loaded"):
        make_agent(nvml, api).run()

    assert api.attempts == 0


def test_it_stops_when_the_driver_goes_away_mid_run():
    nvml = gpus(1)
    nvml.fail("nvmlDeviceGetCount", pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    agent = make_agent(nvml, Api())

    with pytest.raises(NvmlUnavailable):
        agent.run()

    assert nvml.shutdowns == 1


# ---------------------------------------------------------------- the loop


def test_it_sleeps_the_rest_of_each_interval_and_not_after_the_last_cycle():
    sleeps = []
    agent = make_agent(gpus(1), Api(), interval=15, sleep=sleeps.append)

    agent.run(max_cycles=3)

    # The clock advances 1 s per read: start, sample time, end → 2 s spent per cycle.
    assert sleeps == [13.0, 13.0]


def test_it_does_not_sleep_when_a_cycle_overruns_the_interval():
    sleeps = []
    agent = make_agent(gpus(1), Api(), interval=1, sleep=sleeps.append)

    agent.run(max_cycles=2)

    assert sleeps == [0.0]


# ---------------------------------------------------------------- HttpPoster


class _Handler(BaseHTTPRequestHandler):
    status = 200
    received: list

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, dict(self.headers), json.loads(body)))
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"detail": "answer from the test server"}')

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    handler = type("Handler", (_Handler,), {"received": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, handler
    httpd.shutdown()
    httpd.server_close()


def test_the_poster_sends_json_with_the_bearer_token(server):
    httpd, handler = server
    post = HttpPoster(f"http://127.0.0.1:{httpd.server_port}/api/gpu-samples/", "s3cret")

    post({"node": "gpu-1", "samples": []})

    ((path, headers, body),) = handler.received
    assert path == "/api/gpu-samples/"
    assert headers["Authorization"] == "Bearer s3cret"
    assert headers["Content-Type"] == "application/json"
    assert body == {"node": "gpu-1", "samples": []}


@pytest.mark.parametrize(
    ("status", "error"),
    [(401, PostRejected), (400, PostRejected), (429, PostError), (503, PostError)],
)
def test_the_poster_tells_retryable_answers_from_rejections(server, status, error):
    httpd, handler = server
    handler.status = status
    post = HttpPoster(f"http://127.0.0.1:{httpd.server_port}/", "t")

    with pytest.raises(PostError) as info:
        post({})

    assert type(info.value) is error
    assert info.value.status == status
    assert "answer from the test server" in str(info.value)


def test_the_poster_raises_a_retryable_error_when_nothing_listens(server):
    httpd, _ = server
    port = httpd.server_port
    httpd.shutdown()
    httpd.server_close()

    with pytest.raises(PostError) as info:
        HttpPoster(f"http://127.0.0.1:{port}/", "t", timeout=2)({})

    assert type(info.value) is PostError
    assert info.value.status is None


# ---------------------------------------------------------------- main()


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    return path


def test_main_once_posts_one_batch_and_exits_zero(token_file, monkeypatch):
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    api = Api()

    code = main(
        ["--api", "http://x/", "--token-file", str(token_file), "--once"], nvml=gpus(2), post=api
    )

    assert code == 0
    assert [(b["node"], len(b["samples"])) for b in api.batches] == [("gpu-node-7", 2)]


def test_main_once_exits_one_when_the_batch_is_not_delivered(token_file, capsys):
    api = Api()
    api.error = PostError("connection refused")

    code = main(
        ["--api", "http://x/", "--token-file", str(token_file), "--once"], nvml=gpus(1), post=api
    )

    assert code == 1
    assert "could not deliver the batch to http://x/" in capsys.readouterr().err


def test_main_exits_two_with_a_clear_message_without_nvml(token_file, capsys):
    nvml = gpus(1)
    nvml.fail("nvmlInit", pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    code = main(["--api", "http://x/", "--token-file", str(token_file)], nvml=nvml, post=Api())

    assert code == 2
    assert capsys.readouterr().err == (
        "gpu_agent: NVML is unavailable: nvmlInit failed with NVML_ERROR_LIBRARY_NOT_FOUND "
        "(NVML Shared Library Not Found): libnvidia-ml.so.1 was not found; run the agent on a "
        "GPU node with the NVIDIA driver installed, under the NVIDIA container runtime\n"
    )


def test_main_with_the_real_pynvml_exits_two_on_this_gpu_less_machine(token_file, capsys):
    if libnvidia_ml_present():
        pytest.skip("libnvidia-ml is installed here; this test is for GPU-less machines")
    api = Api()

    code = main(["--api", "http://x/", "--token-file", str(token_file), "--once"], post=api)

    assert code == 2
    assert "NVML_ERROR_LIBRARY_NOT_FOUND" in capsys.readouterr().err
    assert api.attempts == 0


@pytest.mark.parametrize(
    ("content", "message"), [(None, "cannot read token file"), ("  \n", "is empty")]
)
def test_main_exits_two_for_an_unusable_token_file(tmp_path, capsys, content, message):
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    api = Api()

    code = main(["--api", "http://x/", "--token-file", str(path), "--once"], nvml=gpus(1), post=api)

    assert code == 2
    assert message in capsys.readouterr().err
    assert api.attempts == 0


@pytest.mark.parametrize(
    "args",
    [
        ["--api", "http://x/", "--interval", "0"],
        ["--api", "http://x/", "--buffer-size", "0"],
        [],  # no --api
    ],
)
def test_main_exits_two_on_bad_arguments(token_file, capsys, args):
    api = Api()

    code = main([*args, "--token-file", str(token_file)], nvml=gpus(1), post=api)

    assert code == 2
    assert "usage: gpu_agent" in capsys.readouterr().err
    assert api.attempts == 0
