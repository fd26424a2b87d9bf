#!/usr/bin/env python3
"""Connection floods against a running Inlet, and its resident memory around them.

    bench/flood.py PID PORT [WAVES] [CONNECTIONS] [idle]

Each wave opens CONNECTIONS connections to 127.0.0.1:PORT that announce a 100 kB webhook
body and send one byte of it (the slow-client case) — or, with `idle`, send nothing at all
(idle connections, held under the server's 5 s request timeout) — holds them 2 s (idle:
4 s), then closes them. Prints the server's VmRSS (from /proc/PID/status) before, its peak
while each wave is held, after each wave and 10 s after the last. Loopback only; bounded
by WAVES x CONNECTIONS.
"""
import asyncio
import resource
import sys
import time


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def slow_client(port: int, hold: float, idle: bool) -> bool:
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), timeout=10
        )
    except (OSError, asyncio.TimeoutError):
        return False
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
    writer.close()
    return True


async def wave(pid: int, port: int, connections: int, idle: bool) -> tuple[int, float]:
    hold = 4.0 if idle else 2.0
    peak = 0.0

    async def sample() -> None:
        nonlocal peak
        for _ in range(int(hold * 4) + 8):
            peak = max(peak, rss_mb(pid))
            await asyncio.sleep(0.25)

    sampler = asyncio.ensure_future(sample())
    results = await asyncio.gather(*(slow_client(port, hold, idle) for _ in range(connections)))
    sampler.cancel()
    return sum(results), peak


def main() -> None:
    pid, port = int(sys.argv[1]), int(sys.argv[2])
    waves = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    connections = int(sys.argv[4]) if len(sys.argv) > 4 else 5000
    idle = len(sys.argv) > 5 and sys.argv[5] == "idle"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"rss before: {rss_mb(pid):.0f} MB")
    for n in range(1, waves + 1):
        opened, peak = asyncio.run(wave(pid, port, connections, idle))
        print(f"rss after wave {n} ({opened}/{connections} connected, peak {peak:.0f} MB "
              f"while held): {rss_mb(pid):.0f} MB")
    time.sleep(10)
    print(f"rss 10 s later: {rss_mb(pid):.0f} MB")


if __name__ == "__main__":
    main()
