from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies = [("inlet_inbox", "0001_initial")]
    operations = [
        migrations.CreateModel(
            name="Payment",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("message_id", models.TextField()),
                ("customer", models.TextField()),
                ("amount", models.IntegerField()),
            ],
        ),
    ]
