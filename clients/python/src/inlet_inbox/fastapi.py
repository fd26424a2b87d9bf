"""A FastAPI dependency that hands the endpoint a :class:`Verified` delivery, or answers
401 before the endpoint runs: the raw body is read and verified first, parsed after."""

from __future__ import annotations

from typing import Awaitable, Callable

from fastapi import HTTPException, Request

from .errors import InvalidSignature
from .verify import Verified, Verifier


def verified_webhook(verifier: Verifier) -> Callable[[Request], Awaitable[Verified]]:
    """``Depends(verified_webhook(verifier))``. A delivery that does not verify gets 401,
    as Inlet's sample receiver answers: Inlet keeps it as a dead letter for an operator
    (a wrong secret is fixed once and the dead letters requeued), rather than retrying it."""

    async def verified(request: Request) -> Verified:
        body = await request.body()
        try:
            return verifier.verify(request.headers, body)
        except InvalidSignature:
            raise HTTPException(status_code=401, detail="invalid signature") from None

    return verified
