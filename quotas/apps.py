from django.apps import AppConfig


class QuotasConfig(AppConfig):
    name = "quotas"
    verbose_name = "Quotas and tenancy"

    def ready(self) -> None:
        # Connects Team.save's ``team_saved`` signal to the transitions it starts.
        from quotas import transitions  # noqa: F401
