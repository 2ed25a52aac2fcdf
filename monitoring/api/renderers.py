"""CSV rendering of chargeback reports, safe to open in a spreadsheet."""

from __future__ import annotations

import csv
import io

from rest_framework import renderers

from monitoring.domain.chargeback import CSV_COLUMNS

# A cell starting with one of these is a formula to Excel, LibreOffice and Google Sheets
# (OWASP "CSV injection"); a leading apostrophe makes it text.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: object) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


class ChargebackCSVRenderer(renderers.BaseRenderer):
    """Renders ``data["rows"]`` under CSV_COLUMNS; an error body as ``field,message`` lines."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\r\n")
        if isinstance(data, dict) and "errors" in data:
            writer.writerow(["field", "message"])
            for field, messages in data["errors"].items():
                for message in messages:
                    writer.writerow([safe_cell(field), safe_cell(message)])
        else:
            rows = (data or {}).get("rows", [])
            writer.writerow(CSV_COLUMNS)
            for row in rows:
                writer.writerow([safe_cell(row.get(name, "")) for name in CSV_COLUMNS])
        return out.getvalue().encode(self.charset)
