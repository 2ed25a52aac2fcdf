"""BudgetAlert.used_hours → allocated_hours: budget use is allocated hours ("used" hours are
measured GPU use), kept to the 4 places of the figure the pages show (issue 29)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("monitoring", "0006_covered_hours_per_team"),
    ]

    operations = [
        migrations.RenameField(
            model_name="budgetalert",
            old_name="used_hours",
            new_name="allocated_hours",
        ),
        migrations.AlterField(
            model_name="budgetalert",
            name="allocated_hours",
            field=models.DecimalField(
                decimal_places=4,
                help_text=(
                    "Budget use when it crossed: allocated hours this month (services.budget_use)."
                ),
                max_digits=20,
            ),
        ),
    ]
