from django.db import models


class RollupPeriod(models.TextChoices):
    HOUR = "hour", "Hourly"
    DAY = "day", "Daily"
    MONTH = "month", "Monthly"


class AlertStatus(models.TextChoices):
    OPEN = "open", "Open"
    RESOLVED = "resolved", "Resolved"
