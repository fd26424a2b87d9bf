"""The destination Inlet delivers to: 200 once the payment and its claim are committed,
200 again for a copy (nothing done), 401 for a delivery that does not verify, 500 when
anything fails before the commit (rolled back, so Inlet retries)."""

from django.conf import settings
from django.http import JsonResponse

from inlet_inbox import Verified, Verifier
from inlet_inbox.django import process, webhook_view

from .models import Payment

VERIFIER = Verifier(settings.INLET_WEBHOOK_SECRETS)


def record_payment(delivery: Verified) -> None:
    """The application's effect: runs inside the claim's transaction."""
    data = delivery.json()["data"]
    Payment.objects.create(
        message_id=delivery.message_id, customer=data["customer"], amount=data["amount"]
    )


@webhook_view(VERIFIER)
def receive(request, delivery: Verified) -> JsonResponse:
    claim = process("payments", delivery, record_payment)  # returns after the commit
    return JsonResponse({"claim": claim.value})
