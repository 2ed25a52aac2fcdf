"""Test doubles shared across the suite.

``FakeNvml`` stands in for the ``pynvml`` module at the one seam ``monitoring.collectors.nvml``
accepts (``nvml=...``). It reuses the real ``pynvml.NVMLError`` hierarchy and error constants, so
``NVMLError(code)`` builds the same subclasses the real library raises and the collector's error
handling is tested against the real classes.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

with warnings.catch_warnings():
    # The pynvml distribution warns on import that it is deprecated in favour of nvidia-ml-py.
    warnings.simplefilter("ignore", FutureWarning)
    import pynvml

GiB = 1024**3


@dataclass
class FakeDevice:
    """One GPU as FakeNvml reports it. ``processes`` holds (pid, used bytes or None) pairs."""

    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    util_gpu: int = 0
    util_mem: int = 0
    mem_used: int = 0
    mem_total: int = 80 * GiB
    power_mw: int = 70_000
    temp_c: int = 35
    processes: list[tuple[int, int | None]] = field(default_factory=list)


@dataclass
class _Failure:
    call: str
    code: int
    device: int | None
    times: int | None  # None: every call from now on


@dataclass(frozen=True)
class FakeHandle:
    index: int


class FakeNvml:
    """A module-shaped NVML double with configurable devices and programmable errors.

    ``fail("nvmlDeviceGetPowerUsage", NVML_ERROR_NOT_SUPPORTED, device=1)`` makes that call
    raise for GPU 1 from now on; ``times=2`` limits it to the next two matching calls;
    ``device=None`` matches every device (and device-less calls such as ``nvmlInit``).
    Like the real library, device calls raise NVML_ERROR_UNINITIALIZED outside a session.
    ``calls`` records every call as ``(name, device index or None)``.
    """

    NVMLError = pynvml.NVMLError
    NVMLLibraryMismatchError = pynvml.NVMLLibraryMismatchError
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU

    def __init__(self, devices: list[FakeDevice] | None = None):
        self.devices = list(devices or [])
        self.calls: list[tuple[str, int | None]] = []
        self.initialized = 0
        self.shutdowns = 0
        self._failures: list[_Failure] = []

    def fail(self, call: str, code: int, *, device: int | None = None, times: int | None = None):
        """Make ``call`` raise ``NVMLError(code)`` (for ``device``, ``times`` times)."""
        if not hasattr(self, call):
            raise AttributeError(f"FakeNvml has no {call}")
        self._failures.append(_Failure(call, code, device, times))

    # ------------------------------------------------------------ library

    def nvmlInit(self) -> None:
        self._enter("nvmlInit", None, needs_init=False)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown", None)
        self.initialized -= 1
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount", None)
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByIndex", index)
        if not 0 <= index < len(self.devices):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(index)

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        return self._device("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return self._device("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> Any:
        d = self._device("nvmlDeviceGetUtilizationRates", handle)
        return SimpleNamespace(gpu=d.util_gpu, memory=d.util_mem)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> Any:
        d = self._device("nvmlDeviceGetMemoryInfo", handle)
        return SimpleNamespace(total=d.mem_total, used=d.mem_used, free=d.mem_total - d.mem_used)

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return self._device("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        d = self._device("nvmlDeviceGetTemperature", handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return d.temp_c

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[Any]:
        d = self._device("nvmlDeviceGetComputeRunningProcesses", handle)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in d.processes]

    # ------------------------------------------------------------ machinery

    def _device(self, call: str, handle: FakeHandle) -> FakeDevice:
        self._enter(call, handle.index)
        return self.devices[handle.index]

    def _enter(self, call: str, device: int | None, *, needs_init: bool = True) -> None:
        self.calls.append((call, device))
        for failure in self._failures:
            if failure.call != call or failure.device not in (None, device):
                continue
            if failure.times is not None:
                if failure.times == 0:
                    continue
                failure.times -= 1
            raise pynvml.NVMLError(failure.code)
        if needs_init and self.initialized <= 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)


# The error codes and NVMLError_* subclasses, exactly as the real module names them.
for _name in dir(pynvml):
    if _name.startswith(("NVML_ERROR_", "NVMLError_")):
        setattr(FakeNvml, _name, getattr(pynvml, _name))
del _name
