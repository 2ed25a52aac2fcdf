import ctypes
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from monitoring.collectors.nvml import (
    GpuProcess,
    GpuReading,
    nvml_session,
    pod_uid_from_cgroup,
    read_all,
)
from monitoring.exceptions import NvmlReadError, NvmlUnavailable
from tests.fakes import FakeDevice, FakeNvml, GiB, pynvml

NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
POD_A = "0b6c4a1e-2f3d-4c5b-8a9e-1f2e3d4c5b6a"
POD_B = "7d1e9f20-aaaa-4bbb-8ccc-123456789abc"


def write_proc(root: Path, pid: int, cgroup: str) -> None:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "cgroup").write_text(cgroup)


def two_gpus() -> FakeNvml:
    return FakeNvml(
        [
            FakeDevice(
                uuid="GPU-aaaa",
                util_gpu=87,
                util_mem=40,
                mem_used=50 * GiB,
                power_mw=612_500,
                temp_c=64,
                processes=[(100, 50 * GiB)],
            ),
            FakeDevice(uuid="GPU-bbbb", name="NVIDIA A100-SXM4-40GB", mem_total=40 * GiB),
        ]
    )


def read(nvml: FakeNvml, proc_root: Path, **kwargs) -> list[GpuReading]:
    with nvml_session(nvml):
        return read_all(nvml, node="gpu-1", now=NOW, proc_root=proc_root, **kwargs)


def libnvidia_ml_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


# ---------------------------------------------------------------- readings


def test_it_reads_every_gpu_with_units_converted(tmp_path):
    write_proc(tmp_path, 100, f"0::/kubepods/burstable/pod{POD_A}/abc123\n")

    readings = read(two_gpus(), tmp_path)

    assert readings == [
        GpuReading(
            node="gpu-1",
            ts=NOW,
            uuid="GPU-aaaa",
            index=0,
            model="NVIDIA H100 80GB HBM3",
            util_gpu=87,
            util_mem=40,
            mem_used=50 * GiB,
            mem_total=80 * GiB,
            power_w=612.5,
            temp_c=64,
            processes=(GpuProcess(pid=100, used_memory=50 * GiB, pod_uid=POD_A),),
        ),
        GpuReading(
            node="gpu-1",
            ts=NOW,
            uuid="GPU-bbbb",
            index=1,
            model="NVIDIA A100-SXM4-40GB",
            util_gpu=0,
            util_mem=0,
            mem_used=0,
            mem_total=40 * GiB,
            power_w=70.0,
            temp_c=35,
            processes=(),
        ),
    ]


def test_it_maps_processes_to_pods_through_the_proc_tree(tmp_path):
    write_proc(
        tmp_path,
        100,
        "0::/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{POD_A.replace('-', '_')}.slice/cri-containerd-4f2a.scope\n",
    )
    write_proc(
        tmp_path,
        200,
        f"12:memory:/kubepods/burstable/pod{POD_B}/9e8d\n"
        f"11:devices:/kubepods/burstable/pod{POD_B}/9e8d\n",
    )
    write_proc(tmp_path, 300, "0::/system.slice/nvidia-persistenced.service\n")
    # pid 400 has exited since NVML listed it: no /proc entry.
    nvml = FakeNvml(
        [FakeDevice(uuid="GPU-aaaa", processes=[(100, GiB), (200, 2 * GiB), (300, None), (400, 1)])]
    )

    (reading,) = read(nvml, tmp_path)

    assert reading.processes == (
        GpuProcess(pid=100, used_memory=GiB, pod_uid=POD_A),
        GpuProcess(pid=200, used_memory=2 * GiB, pod_uid=POD_B),
        GpuProcess(pid=300, used_memory=None, pod_uid=None),
        GpuProcess(pid=400, used_memory=1, pod_uid=None),
    )


@pytest.mark.parametrize(
    ("cgroup", "uid"),
    [
        pytest.param(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-"
            "pod0b6c4a1e_2f3d_4c5b_8a9e_1f2e3d4c5b6a.slice/cri-containerd-4f2a.scope",
            POD_A,
            id="v2-systemd-besteffort",
        ),
        pytest.param(
            "0::/kubepods.slice/kubepods-pod0b6c4a1e_2f3d_4c5b_8a9e_1f2e3d4c5b6a.slice/"
            "docker-4f2a.scope",
            POD_A,
            id="v2-systemd-guaranteed",
        ),
        pytest.param(f"0::/kubepods/burstable/pod{POD_A}/4f2a", POD_A, id="v2-cgroupfs-burstable"),
        pytest.param(
            f"12:pids:/kubepods/pod{POD_A}/4f2a\n11:memory:/kubepods/pod{POD_A}/4f2a\n",
            POD_A,
            id="v1-cgroupfs-guaranteed",
        ),
        pytest.param(
            "12:cpuset:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-"
            "pod0b6c4a1e_2f3d_4c5b_8a9e_1f2e3d4c5b6a.slice/cri-containerd-4f2a.scope\n"
            "1:name=systemd:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-"
            "pod0b6c4a1e_2f3d_4c5b_8a9e_1f2e3d4c5b6a.slice/cri-containerd-4f2a.scope\n",
            POD_A,
            id="v1-systemd-burstable",
        ),
        pytest.param(
            "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
            "kubelet-kubepods-besteffort-pod0b6c4a1e_2f3d_4c5b_8a9e_1f2e3d4c5b6a.slice/"
            "cri-containerd-4f2a.scope",
            POD_A,
            id="v2-systemd-nested-kubelet-root",
        ),
        pytest.param("0::/system.slice/sshd.service", None, id="host-service"),
        pytest.param("0::/docker/4f2a9e8d", None, id="plain-docker"),
        pytest.param(f"0::/user.slice/pod{POD_A}", None, id="pod-like-name-outside-kubepods"),
        pytest.param("0::/", None, id="root-cgroup"),
        pytest.param("", None, id="empty"),
    ],
)
def test_it_finds_the_pod_uid_in_cgroup_paths(cgroup, uid):
    assert pod_uid_from_cgroup(cgroup) == uid


# ---------------------------------------------------------------- errors: fatal


def test_it_raises_unavailable_when_the_library_is_not_found():
    nvml = FakeNvml()
    nvml.fail("nvmlInit", pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    with pytest.raises(NvmlUnavailable) as info, nvml_session(nvml):
        pytest.fail("the block must not run without NVML")

    assert info.value.error_name == "NVML_ERROR_LIBRARY_NOT_FOUND"
    assert "libnvidia-ml.so.1 was not found" in str(info.value)
    assert isinstance(info.value.__cause__, pynvml.NVMLError_LibraryNotFound)
    assert nvml.shutdowns == 0


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver is not loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "/dev/nvidia*"),
        (pynvml.NVML_ERROR_UNKNOWN, "NVML_ERROR_UNKNOWN"),
    ],
)
def test_any_init_failure_makes_nvml_unavailable(code, hint):
    nvml = FakeNvml()
    nvml.fail("nvmlInit", code)

    with pytest.raises(NvmlUnavailable, match="nvmlInit failed") as info, nvml_session(nvml):
        pass

    assert hint in str(info.value)
    assert info.value.code == code


def test_the_real_pynvml_fails_cleanly_without_a_gpu():
    if libnvidia_ml_present():
        pytest.skip("libnvidia-ml is installed here; this test is for GPU-less machines")

    with pytest.raises(NvmlUnavailable) as info, nvml_session():
        pass

    assert str(info.value).startswith(
        "NVML is unavailable: nvmlInit failed with NVML_ERROR_LIBRARY_NOT_FOUND"
    )
    assert isinstance(info.value.__cause__, pynvml.NVMLError_LibraryNotFound)


@pytest.mark.parametrize(
    "code", ["DRIVER_NOT_LOADED", "NO_PERMISSION", "UNINITIALIZED", "LIB_RM_VERSION_MISMATCH"]
)
def test_it_raises_unavailable_when_nvml_becomes_unusable_mid_run(tmp_path, code):
    nvml = two_gpus()
    nvml.fail("nvmlDeviceGetHandleByIndex", getattr(pynvml, f"NVML_ERROR_{code}"), device=1)

    with pytest.raises(NvmlUnavailable, match=f"on GPU 1 with NVML_ERROR_{code}"):
        read(nvml, tmp_path)


def test_it_shuts_nvml_down_when_the_block_raises():
    nvml = FakeNvml()

    with pytest.raises(RuntimeError), nvml_session(nvml):
        raise RuntimeError("boom")

    assert (nvml.initialized, nvml.shutdowns) == (0, 1)


# ---------------------------------------------------------------- errors: transient


@pytest.mark.parametrize("code", ["GPU_IS_LOST", "TIMEOUT", "UNKNOWN"])
@pytest.mark.parametrize(
    "call", ["nvmlDeviceGetHandleByIndex", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetPowerUsage"]
)
def test_a_transient_error_skips_only_that_gpu(tmp_path, code, call):
    nvml = two_gpus()
    nvml.fail(call, getattr(pynvml, f"NVML_ERROR_{code}"), device=0)
    skipped = []

    readings = read(nvml, tmp_path, on_skip=skipped.append)

    assert [r.uuid for r in readings] == ["GPU-bbbb"]
    (error,) = skipped
    assert isinstance(error, NvmlReadError)
    assert (error.error_name, error.call, error.device_index) == (f"NVML_ERROR_{code}", call, 0)


def test_a_lost_gpu_is_read_again_once_it_is_back(tmp_path):
    nvml = two_gpus()
    nvml.fail("nvmlDeviceGetUUID", pynvml.NVML_ERROR_GPU_IS_LOST, device=1, times=1)

    first = read(nvml, tmp_path)
    second = read(nvml, tmp_path)

    assert [r.uuid for r in first] == ["GPU-aaaa"]
    assert [r.uuid for r in second] == ["GPU-aaaa", "GPU-bbbb"]


def test_a_failing_device_count_raises_a_read_error(tmp_path):
    nvml = two_gpus()
    nvml.fail("nvmlDeviceGetCount", pynvml.NVML_ERROR_TIMEOUT)

    with pytest.raises(NvmlReadError, match="nvmlDeviceGetCount failed: NVML_ERROR_TIMEOUT"):
        read(nvml, tmp_path)


@pytest.mark.parametrize(
    ("call", "fields"),
    [
        ("nvmlDeviceGetPowerUsage", {"power_w": None}),
        ("nvmlDeviceGetTemperature", {"temp_c": None}),
        ("nvmlDeviceGetUtilizationRates", {"util_gpu": None, "util_mem": None}),
        ("nvmlDeviceGetComputeRunningProcesses", {"processes": ()}),
    ],
)
def test_an_unsupported_optional_field_becomes_none(tmp_path, call, fields):
    write_proc(tmp_path, 100, f"0::/kubepods/burstable/pod{POD_A}/abc123\n")
    expected = read(two_gpus(), tmp_path)[0]
    nvml = two_gpus()
    nvml.fail(call, pynvml.NVML_ERROR_NOT_SUPPORTED, device=0)

    readings = read(nvml, tmp_path)

    assert readings[0] == GpuReading(**{**expected.__dict__, **fields})
    assert readings[0] != expected


def test_an_unsupported_required_field_skips_the_sample(tmp_path):
    nvml = two_gpus()
    nvml.fail("nvmlDeviceGetMemoryInfo", pynvml.NVML_ERROR_NOT_SUPPORTED, device=1)
    skipped = []

    readings = read(nvml, tmp_path, on_skip=skipped.append)

    assert [r.uuid for r in readings] == ["GPU-aaaa"]
    assert [e.error_name for e in skipped] == ["NVML_ERROR_NOT_SUPPORTED"]


def test_a_driver_too_old_for_the_process_list_leaves_it_empty(tmp_path, monkeypatch):
    nvml = two_gpus()

    def mismatch(handle):
        raise pynvml.NVMLLibraryMismatchError("use nvmlDeviceGetComputeRunningProcesses_v2")

    monkeypatch.setattr(nvml, "nvmlDeviceGetComputeRunningProcesses", mismatch)

    readings = read(nvml, tmp_path)

    assert [r.processes for r in readings] == [(), ()]
    assert readings[0].util_gpu == 87


# ---------------------------------------------------------------- the seam


def test_fake_nvml_raises_the_real_pynvml_error_classes():
    nvml = FakeNvml([FakeDevice(uuid="GPU-aaaa")])

    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()

    nvml.fail("nvmlDeviceGetCount", FakeNvml.NVML_ERROR_GPU_IS_LOST, times=1)
    nvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetCount()
    assert nvml.nvmlDeviceGetCount() == 1


def test_importing_the_collectors_does_not_import_pynvml():
    code = (
        "import sys, monitoring.collectors.nvml, monitoring.collectors.agent; "
        "assert not [m for m in sys.modules if m.split('.')[0] in {'pynvml', 'django'}], "
        "sorted(m for m in sys.modules if m.startswith(('pynvml', 'django')))"
    )

    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 0, result.stderr
