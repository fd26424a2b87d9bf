#!/usr/bin/env python3
"""Connection floods against a running Inlet, and its resident memory around them.

    bench/flood.py PID PORT [WAVES] [CONNECTIONS] [idle]

Each wave opens CONNECTIONS connections to 127.0.0.1:PORT that announce a 100 kB webhook
body and send one byte of it (the slow-client case) — or, with `idle`, send nothing at all
(idle connections, held until every one is connected and 1 s more, inside the server's
5 s wait for a first request) — holds them 2 s, then closes them. Prints the server's VmRSS (from /proc/PID/status) before, its peak
while each wave is held, after each wave and 10 s after the last. Idle waves also print
how many connections at most waited in the listener's accept queue (`ss`: connected by
the kernel, not yet taken by Inlet) and how many answered a `GET /healthz` sent on each
once the hold is over. Inlet closes a connection that sends no request within 5 s, by
design: when connecting them all takes longer than that, the first ones are closed
before their request, and only those still waiting to be accepted answer. Loopback
only; bounded by WAVES x CONNECTIONS.
"""
import asyncio
import resource
import subprocess
import sys
import time


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def accept_queue(port: int) -> int:
    """Connections waiting in the listener's accept queue (its Recv-Q), 0 if unknown."""
    try:
        out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True,
                             text=True, timeout=5).stdout.split()
        return int(out[1]) if len(out) > 1 else 0
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


async def answered(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """Whether the server answers a request on this connection (within 30 s)."""
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout=30)
        return line.startswith(b"HTTP/1.1 200")
    except (OSError, asyncio.TimeoutError):
        return False


class Gate:
    """Opens once every client of a wave has connected or failed to."""

    def __init__(self, clients: int) -> None:
        self.left, self.open = clients, asyncio.Event()

    def arrived(self) -> None:
        self.left -= 1
        if self.left <= 0:
            self.open.set()


async def slow_client(port: int, hold: float, idle: bool, gate: Gate) -> int:
    """0: not connected; 1: connected; 2: connected, idle, and answered afterwards."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), timeout=10
        )
    except (OSError, asyncio.TimeoutError):
        gate.arrived()
        return 0
    gate.arrived()
    if idle:
        await gate.open.wait()
    if not idle:
        writer.write(
            b"POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Stripe-Signature: t=1,v1=00\r\nContent-Length: 100000\r\n\r\n{"
        )
    try:
        await writer.drain()
        await asyncio.sleep(hold)
    except OSError:
        pass
    served = idle and await answered(reader, writer)
    writer.close()
    return 2 if served else 1


async def wave(pid: int, port: int, connections: int, idle: bool):
    """(connected, answered, peak RSS in MB, most waiting to be accepted)."""
    hold = 1.0 if idle else 2.0
    peak, queued = 0.0, 0
    gate = Gate(connections)

    async def sample() -> None:
        nonlocal peak, queued
        for _ in range(40):
            peak = max(peak, rss_mb(pid))
            queued = max(queued, accept_queue(port))
            await asyncio.sleep(0.25)

    sampler = asyncio.ensure_future(sample())
    results = await asyncio.gather(
        *(slow_client(port, hold, idle, gate) for _ in range(connections))
    )
    sampler.cancel()
    return sum(r > 0 for r in results), sum(r == 2 for r in results), peak, queued


def main() -> None:
    pid, port = int(sys.argv[1]), int(sys.argv[2])
    waves = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    connections = int(sys.argv[4]) if len(sys.argv) > 4 else 5000
    idle = len(sys.argv) > 5 and sys.argv[5] == "idle"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"rss before: {rss_mb(pid):.0f} MB")
    for n in range(1, waves + 1):
        opened, served, peak, queued = asyncio.run(wave(pid, port, connections, idle))
        extra = f", up to {queued} waiting to be accepted, {served} answered after" if idle else ""
        print(f"rss after wave {n} ({opened}/{connections} connected, peak {peak:.0f} MB "
              f"while held{extra}): {rss_mb(pid):.0f} MB")
    time.sleep(10)
    print(f"rss 10 s later: {rss_mb(pid):.0f} MB")


if __name__ == "__main__":
    main()
