from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The pages people use that combine the apps; it may import every app, no app imports it."""

    name = "portal"
    verbose_name = "Portal"
