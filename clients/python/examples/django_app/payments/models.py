"""The application's own table."""

from django.db import models


class Payment(models.Model):
    # Deliberately no unique constraint: the inbox alone keeps each payment to one row,
    # which is what the tests check.
    message_id = models.TextField()
    customer = models.TextField()
    amount = models.IntegerField()
