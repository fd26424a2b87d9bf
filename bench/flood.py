#!/usr/bin/env python3
"""Connection floods against a running Inlet, and its resident memory around them.

    bench/flood.py PID PORT [WAVES] [CONNECTIONS]

Each wave opens CONNECTIONS connections to 127.0.0.1:PORT that announce a 100 kB webhook
body and send one byte of it (the slow-client case), holds them 2 s, then closes them.
Prints the server's VmRSS (from /proc/PID/status) before, after each wave and 10 s after
the last. Loopback only; bounded by WAVES x CONNECTIONS.
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


async def slow_client(port: int, hold: float) -> bool:
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), timeout=10
        )
    except (OSError, asyncio.TimeoutError):
        return False
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


async def wave(port: int, connections: int) -> int:
    results = await asyncio.gather(*(slow_client(port, 2.0) for _ in range(connections)))
    return sum(results)


def main() -> None:
    pid, port = int(sys.argv[1]), int(sys.argv[2])
    waves = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    connections = int(sys.argv[4]) if len(sys.argv) > 4 else 5000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"rss before: {rss_mb(pid):.0f} MB")
    for n in range(1, waves + 1):
        opened = asyncio.run(wave(port, connections))
        print(f"rss after wave {n} ({opened}/{connections} connected): {rss_mb(pid):.0f} MB")
    time.sleep(10)
    print(f"rss 10 s later: {rss_mb(pid):.0f} MB")


if __name__ == "__main__":
    main()
