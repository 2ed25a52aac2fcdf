"""Structured (JSON lines) logging for production: one object per record."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

_STANDARD = set(vars(logging.makeLogRecord({})))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_") and key not in payload:
                try:
                    json.dumps(value)
                except (TypeError, ValueError):
                    value = repr(value)
                payload[key] = value
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, ensure_ascii=False)


class RedactSecretsFilter(logging.Filter):
    """Never log bearer tokens or API keys, whatever a library puts in a message."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "fs_" in message or "Bearer " in message:
            import re

            message = re.sub(r"fs_[A-Za-z0-9_\-]{8,}", "fs_[redacted]", message)
            message = re.sub(r"Bearer\s+\S+", "Bearer [redacted]", message)
            record.msg, record.args = message, None
        return True
