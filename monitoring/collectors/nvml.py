"""NVML edge: read GPU utilization, memory, power, temperature and processes on this node.

This is the only module that imports ``pynvml``, and it does so lazily, inside
:func:`load_pynvml`, so importing it costs nothing on machines without a GPU. Everything else
goes through one seam: functions take the NVML module as an argument (``nvml``), which is the
real ``pynvml`` in production and ``tests.fakes.FakeNvml`` in tests. Error codes and the
``NVMLError`` class are read from that same argument, so the double must reuse the real
``pynvml.NVMLError`` hierarchy.

Error policy (``pynvml.NVMLError`` never leaves this module):

* ``nvmlInit`` failing for any reason, and at any time ``NVML_ERROR_LIBRARY_NOT_FOUND``,
  ``DRIVER_NOT_LOADED``, ``NO_PERMISSION``, ``UNINITIALIZED`` or ``LIB_RM_VERSION_MISMATCH``
  → :class:`NvmlUnavailable` (fatal, with a message saying what to check).
* Any other error while reading one GPU (``GPU_IS_LOST``, ``TIMEOUT``, ``UNKNOWN``, ...)
  → that GPU's sample is skipped (:class:`NvmlReadError`, logged and passed to ``on_skip``);
  the other GPUs are still read.
* ``NOT_SUPPORTED`` (or ``FUNCTION_NOT_FOUND``) on an optional field (utilization, power,
  temperature) → the field is None; on the process list → no processes. On a required field
  (UUID, name, memory) the sample is skipped.

Processes are mapped to pods through ``<proc_root>/<pid>/cgroup``: NVML reports host PIDs, so
the agent runs with ``hostPID: true`` (or mounts the host's /proc and passes ``proc_root``).
Only the pod UID is known here; the agent resolves namespace and name.
"""

from __future__ import annotations

import logging
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from monitoring.exceptions import CollectorError, NvmlReadError, NvmlUnavailable

logger = logging.getLogger(__name__)

# Codes after which NVML cannot be used at all on this node, whichever call returned them.
_FATAL_CODES = (
    "NVML_ERROR_LIBRARY_NOT_FOUND",
    "NVML_ERROR_DRIVER_NOT_LOADED",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_UNINITIALIZED",
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
)
# Codes that mean "this device does not have that field", not "something went wrong".
_UNSUPPORTED_CODES = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND")

_HINTS = {
    "NVML_ERROR_LIBRARY_NOT_FOUND": (
        "libnvidia-ml.so.1 was not found; run the agent on a GPU node with the NVIDIA driver "
        "installed, under the NVIDIA container runtime"
    ),
    "NVML_ERROR_DRIVER_NOT_LOADED": "the NVIDIA kernel driver is not loaded on this node",
    "NVML_ERROR_NO_PERMISSION": (
        "no permission to open the GPU devices; the agent needs access to /dev/nvidia* "
        "(e.g. NVIDIA_VISIBLE_DEVICES=all)"
    ),
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": (
        "the NVML library and the loaded kernel driver differ in version (driver upgraded "
        "without a reboot?)"
    ),
}

_UUID_RE = r"[0-9a-f]{8}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{4}[-_]?[0-9a-f]{12}"
# One cgroup path segment naming a pod: "pod<uid>" (cgroupfs driver) or
# "kubepods-<qos>-pod<uid_with_underscores>.slice" (systemd driver).
_POD_SEGMENT_RE = re.compile(rf"^(?:.*-)?pod(?P<uid>{_UUID_RE})(?:\.slice)?$")


@dataclass(frozen=True)
class GpuProcess:
    """A compute process on a GPU. ``used_memory`` is in bytes (None if NVML can't tell)."""

    pid: int
    used_memory: int | None
    pod_uid: str | None = None
    namespace: str | None = None
    pod: str | None = None


@dataclass(frozen=True)
class GpuReading:
    """One sample of one GPU. Optional fields are None where the device does not support them.

    Units: utilization in percent (0-100), memory in bytes, power in watts, temperature in °C.
    """

    node: str
    ts: datetime
    uuid: str
    index: int
    model: str
    util_gpu: int | None
    util_mem: int | None
    mem_used: int
    mem_total: int
    power_w: float | None
    temp_c: int | None
    processes: tuple[GpuProcess, ...] = ()


def load_pynvml() -> ModuleType:
    """Import and return the real ``pynvml`` module.

    Raises NvmlUnavailable if the package is not installed.
    """
    try:
        # The "pynvml" distribution installs an import hook that warns it is deprecated in
        # favour of nvidia-ml-py; the module it provides is nvidia-ml-py's, so the warning is
        # noise in the agent's log.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            import pynvml
    except ImportError as e:
        raise NvmlUnavailable(
            "NVML is unavailable: the pynvml package is not installed (pip install nvidia-ml-py)"
        ) from e
    return pynvml


@contextmanager
def nvml_session(nvml: Any = None) -> Iterator[Any]:
    """Initialise NVML for the duration of the block and shut it down afterwards.

    ``nvml`` defaults to the real ``pynvml`` module (imported on first use). Yields the module.
    Raises NvmlUnavailable if NVML cannot be initialised, whatever the error code. A failing
    ``nvmlShutdown`` is logged, not raised, so it never hides an error from the block.
    """
    if nvml is None:
        nvml = load_pynvml()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        raise _unavailable(nvml, e, call="nvmlInit") from e
    try:
        yield nvml
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as e:
            logger.warning("nvmlShutdown failed: %s (%s)", error_name(nvml, e), e)


def read_all(
    nvml: Any,
    *,
    node: str,
    now: datetime,
    proc_root: str | Path = "/proc",
    on_skip: Callable[[NvmlReadError], None] | None = None,
) -> list[GpuReading]:
    """Read every GPU on this node, in index order, inside an open :func:`nvml_session`.

    1. Count the devices; a transient failure here raises NvmlReadError (nothing was read).
    2. Read each device; a transient failure skips that device only: it is logged and passed
       to ``on_skip``, and the others are still read.
    3. Map each process to its pod UID through ``<proc_root>/<pid>/cgroup``.

    Raises NvmlUnavailable if NVML becomes unusable (driver unloaded, permission lost).
    """
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as e:
        raise _translate(nvml, e, call="nvmlDeviceGetCount") from e
    readings = []
    for index in range(count):
        try:
            readings.append(_read_device(nvml, index, node=node, now=now, proc_root=proc_root))
        except NvmlReadError as e:
            logger.warning("skipped GPU %d on %s: %s", index, node, e)
            if on_skip is not None:
                on_skip(e)
    return readings


def pod_uid_from_cgroup(text: str) -> str | None:
    """Return the pod UID named in the contents of a ``/proc/<pid>/cgroup`` file.

    Understands cgroup v1 (one line per controller) and v2 (``0::/path``), with the cgroupfs
    driver (``/kubepods/burstable/pod<uid>/<container>``) and the systemd driver
    (``/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid_with_underscores>
    .slice/cri-containerd-<id>.scope``). Underscores in the UID become dashes. Return None if
    the process is not in a Kubernetes pod (no ``kubepods`` in the path).
    """
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or "kubepods" not in parts[2]:
            continue
        for segment in parts[2].split("/"):
            match = _POD_SEGMENT_RE.match(segment)
            if match:
                return match["uid"].replace("_", "-")
    return None


def error_name(nvml: Any, error: Exception) -> str:
    """Return the NVML constant name of ``error``'s code, e.g. ``"NVML_ERROR_GPU_IS_LOST"``."""
    code = getattr(error, "value", None)
    for name in dir(nvml):
        if name.startswith("NVML_ERROR_") and getattr(nvml, name) == code:
            return name
    return f"NVML error {code}"


# ---------------------------------------------------------------- internals


def _read_device(
    nvml: Any, index: int, *, node: str, now: datetime, proc_root: str | Path
) -> GpuReading:
    handle = _call(nvml, index, "nvmlDeviceGetHandleByIndex", index)
    util = _optional(nvml, index, "nvmlDeviceGetUtilizationRates", handle)
    memory = _call(nvml, index, "nvmlDeviceGetMemoryInfo", handle)
    power_mw = _optional(nvml, index, "nvmlDeviceGetPowerUsage", handle)
    temp = _optional(nvml, index, "nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU)
    return GpuReading(
        node=node,
        ts=now,
        uuid=_call(nvml, index, "nvmlDeviceGetUUID", handle),
        index=index,
        model=_call(nvml, index, "nvmlDeviceGetName", handle),
        util_gpu=None if util is None else int(util.gpu),
        util_mem=None if util is None else int(util.memory),
        mem_used=int(memory.used),
        mem_total=int(memory.total),
        power_w=None if power_mw is None else power_mw / 1000,
        temp_c=None if temp is None else int(temp),
        processes=_processes(nvml, index, handle, proc_root),
    )


def _processes(nvml: Any, index: int, handle: Any, proc_root: str | Path) -> tuple[GpuProcess, ...]:
    try:
        procs = _optional(nvml, index, "nvmlDeviceGetComputeRunningProcesses", handle)
    except getattr(nvml, "NVMLLibraryMismatchError", ()) as e:
        # pynvml asks for the v3 process list, which drivers older than R510 lack.
        logger.warning("GPU %d: cannot list processes with this driver: %s", index, e)
        procs = None
    return tuple(
        GpuProcess(
            pid=int(p.pid),
            used_memory=None if p.usedGpuMemory is None else int(p.usedGpuMemory),
            pod_uid=_pod_uid_of(int(p.pid), proc_root),
        )
        for p in procs or ()
    )


def _pod_uid_of(pid: int, proc_root: str | Path) -> str | None:
    try:
        text = (Path(proc_root) / str(pid) / "cgroup").read_text()
    except OSError as e:
        # The process may have exited since NVML listed it, or live in another PID namespace.
        logger.debug("cannot read cgroup of pid %d: %s", pid, e)
        return None
    return pod_uid_from_cgroup(text)


def _call(nvml: Any, index: int, function: str, *args: Any) -> Any:
    try:
        return getattr(nvml, function)(*args)
    except nvml.NVMLError as e:
        raise _translate(nvml, e, call=function, index=index) from e


def _optional(nvml: Any, index: int, function: str, *args: Any) -> Any:
    """Call an NVML function for a field that some devices lack; return None if unsupported."""
    try:
        return getattr(nvml, function)(*args)
    except nvml.NVMLError as e:
        if error_name(nvml, e) in _UNSUPPORTED_CODES:
            return None
        raise _translate(nvml, e, call=function, index=index) from e


def _translate(
    nvml: Any, error: Exception, *, call: str, index: int | None = None
) -> CollectorError:
    name = error_name(nvml, error)
    if name in _FATAL_CODES:
        return _unavailable(nvml, error, call=call, index=index)
    where = "" if index is None else f" on GPU {index}"
    return NvmlReadError(
        f"{call} failed{where}: {name} ({error})",
        code=getattr(error, "value", None),
        error_name=name,
        call=call,
        device_index=index,
    )


def _unavailable(
    nvml: Any, error: Exception, *, call: str, index: int | None = None
) -> NvmlUnavailable:
    name = error_name(nvml, error)
    hint = _HINTS.get(name)
    where = "" if index is None else f" on GPU {index}"
    return NvmlUnavailable(
        f"NVML is unavailable: {call} failed{where} with {name} ({error})"
        + (f": {hint}" if hint else ""),
        code=getattr(error, "value", None),
        error_name=name,
        call=call,
        device_index=index,
    )
