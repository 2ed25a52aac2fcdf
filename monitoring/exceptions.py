"""Domain errors of the monitoring app.

The edges (``collectors/``) translate third-party errors into these; nothing outside
``collectors/nvml.py`` catches ``pynvml.NVMLError``.
"""


class DomainError(Exception):
    """Base of every error the monitoring app raises on purpose."""


class CollectorError(DomainError):
    """A collector could not read its source.

    ``code`` and ``error_name`` carry the NVML return code and its constant name
    (``"NVML_ERROR_GPU_IS_LOST"``) when the cause is an NVML error; ``call`` is the library
    function that failed and ``device_index`` the GPU it was called for (None if not per device).
    """

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        error_name: str | None = None,
        call: str | None = None,
        device_index: int | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.error_name = error_name
        self.call = call
        self.device_index = device_index


class NvmlUnavailable(CollectorError):
    """NVML cannot be used on this node at all (no library, no driver, no permission).

    Fatal: the agent stops and its command exits non-zero with this message.
    """


class NvmlReadError(CollectorError):
    """A transient read failure (GPU lost, timeout, unknown error): skip that sample, keep going."""


class PostError(DomainError):
    """Posting a batch failed in a way worth retrying (connection error, timeout, 429, 5xx).

    ``status`` is the HTTP status when the server answered, else None.
    """

    def __init__(self, message: str, *, status: int | None = None):
        super().__init__(message)
        self.status = status


class PostRejected(PostError):
    """The API refused the batch for good (4xx other than 429): retrying would not help.

    The agent logs it, drops the batch and counts its samples as dropped.
    """
