#!/usr/bin/env python3
"""A stand-in of Stripe's events list (`GET /v1/events`) for bench/reconcile.sh: COUNT
events, one a second back from now (newest first, as Stripe lists them), `limit` up to
100, `starting_after`, `has_more`, `Authorization: Bearer KEY` checked. Written from
https://docs.stripe.com/api/events/list; only what a reconciliation run asks for.

    bench/stripe_events.py PORT COUNT KEY
"""
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

PORT, COUNT, KEY = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
NOW = int(time.time())


def event(i):
    """Event i (0 the newest): what a recovered event's JSON looks like, about 300 bytes."""
    return {
        "id": f"evt_bench_{i:06d}",
        "object": "event",
        "api_version": "2024-06-20",
        "created": NOW - 3600 - i,
        "type": "payment_intent.succeeded",
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": None, "idempotency_key": None},
        "data": {"object": {"id": f"pi_bench_{i:06d}", "object": "payment_intent", "amount": 1000 + i % 1000, "currency": "eur"}},
    }


EVENTS = [json.dumps(event(i), separators=(",", ":")) for i in range(COUNT)]
CALLS = {"n": 0}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without TCP_NODELAY the second waits for the
    # client's delayed ACK (40 ms a page), which would be the stand-in's cost, not Inlet's.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urlparse(self.path)
        if url.path == "/calls":
            return self.answer(200, json.dumps(CALLS))
        if url.path != "/v1/events":
            return self.answer(404, '{"error":{"type":"invalid_request_error","message":"Unrecognized request URL"}}')
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            return self.answer(401, '{"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}}')
        with LOCK:
            CALLS["n"] += 1
        query = parse_qs(url.query)
        limit = min(int(query.get("limit", ["10"])[0]), 100)
        start = 0
        if "starting_after" in query:
            start = int(query["starting_after"][0].rsplit("_", 1)[1]) + 1
        page = EVENTS[start:start + limit]
        has_more = start + limit < COUNT
        body = '{"object":"list","url":"/v1/events","has_more":%s,"data":[%s]}' % (
            "true" if has_more else "false", ",".join(page))
        self.answer(200, body)


# The bench's exit trap stops it with SIGTERM, whatever disposition it was started with.
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
