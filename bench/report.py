#!/usr/bin/env python3
"""The arithmetic and formatting of bench/run.sh, kept out of the shell script.

    report.py pgbench OUTPUT LOG_PREFIX WAL_BYTES WAL_DB_BYTES [PER_TX]
                                                    pgbench's output and per-transaction
                                                    logs -> one JSON result on stdout
                                                    (PER_TX webhooks per transaction)
    report.py median RESULTS_DIR NAME               of NAME_r1.json, NAME_r2.json, …: the
                                                    round of median throughput -> NAME.json
    report.py line LABEL RESULT.json                one line per run
    report.py summary RESULTS_DIR                   every target of issue 12: figure,
                                                    ratio, pass or fail

Results are JSON files named after the run (see run.sh); an `inlet bench --json` report
may carry extra "wal_bytes" and "wal_bytes_db": the write-ahead log written during the
run, by the whole cluster and by this database alone (null when not measured).
"""

import glob
import json
import os
import re
import sys


def percentile(sorted_values, q):
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * len(sorted_values)) - 1))
    return sorted_values[index]


def pgbench(output_file, log_prefix, wal_bytes, wal_bytes_db, per_tx="1"):
    """pgbench's summary and its `-l` logs (third column: latency in µs) as a result;
    `per_tx` webhooks per transaction (the batched ceiling's 64)."""
    text = open(output_file, encoding="utf-8").read()

    def number(pattern):
        match = re.search(pattern, text, re.MULTILINE)
        return float(match.group(1)) if match else 0.0

    micros = []
    for path in glob.glob(log_prefix + ".*"):
        with open(path, encoding="utf-8") as log:
            for row in log:
                fields = row.split()
                if len(fields) >= 3 and fields[2].isdigit():
                    micros.append(int(fields[2]))
    micros.sort()
    ms = [m / 1000.0 for m in micros]
    transactions = int(number(r"^number of transactions actually processed: (\d+)"))
    per_tx = int(per_tx)
    result = {
        "tps": number(r"^tps = ([\d.]+)"),
        "per_tx": per_tx,
        "webhooks_per_sec": number(r"^tps = ([\d.]+)") * per_tx,
        "webhooks": transactions * per_tx,
        "transactions": transactions,
        "failed": int(number(r"^number of failed transactions: (\d+)")),
        "wal_bytes": int(wal_bytes),
        "wal_bytes_db": json.loads(wal_bytes_db),
        "latency_ms": {
            "p50": percentile(ms, 0.5),
            "p90": percentile(ms, 0.9),
            "p99": percentile(ms, 0.99),
            "p999": percentile(ms, 0.999),
            "max": ms[-1] if ms else 0.0,
        },
    }
    print(json.dumps(result))


def latency(l):
    return (
        f"p50 {l['p50']:.2f}  p99 {l['p99']:.2f}  p99.9 {l['p999']:.2f}  max {l['max']:.2f} ms"
    )


def wal_text(r, count, unit):
    """The WAL per transaction: the cluster's, and this database's alone when measured."""
    text = f"WAL {r['wal_bytes'] / max(count, 1):,.0f} B/{unit}"
    if r.get("wal_bytes_db") is not None:
        text += f" (this database {r['wal_bytes_db'] / max(count, 1):,.0f})"
    return text


def wal_per(r, count):
    """This database's WAL per transaction when measured, else the cluster's."""
    wal = r["wal_bytes_db"] if r.get("wal_bytes_db") is not None else r["wal_bytes"]
    return wal / max(count, 1)


def line(label, path):
    r = json.load(open(path, encoding="utf-8"))
    if "tps" in r:  # pgbench
        per_tx = r.get("per_tx", 1)
        rate = f"{r['webhooks_per_sec']:>8.0f} webhooks/s" if per_tx > 1 else ""
        wal = wal_text(r, r.get("webhooks", r["transactions"]), "webhook")
        print(
            f"{label:<44} {r['tps']:>8.0f} tx/s  {rate:>18} {latency(r['latency_ms'])}"
            f"   {wal}, failed {r['failed']}"
        )
        return
    if r["mode"].startswith("ceiling"):
        print(f"{label:<44} {r['accepted_per_sec']:>8.0f} webhooks/s {'':>12} "
              f"{latency(r['latency_ms'])} (per transaction)")
        return
    extra = ""
    if "wal_bytes" in r:
        extra = "   " + wal_text(r, r["accepted"], "accepted")
    statuses = ", ".join(f"{s}: {n}" for s, n in r["statuses"].items())
    print(
        f"{label:<44} {r['requests_per_sec']:>8.0f} req/s {r['accepted_per_sec']:>8.0f} accepted/s"
        f"  {latency(r['latency_ms'])}   {{{statuses}}}{extra}"
    )


def throughput(r):
    """Webhooks (or messages) per second of any result."""
    if "tps" in r:
        return r.get("webhooks_per_sec", r["tps"])
    return r["accepted_per_sec"]


def median(directory, name):
    """Of a run's rounds (NAME_r1.json, …), the one of median throughput, as NAME.json;
    the rounds' figures are kept in it under "rounds"."""
    paths = sorted(glob.glob(os.path.join(directory, name + "_r*.json")))
    rounds = [json.load(open(p, encoding="utf-8")) for p in paths]
    if not rounds:
        return
    ordered = sorted(rounds, key=throughput)
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["rounds"] = [round(throughput(r)) for r in rounds]
    json.dump(chosen, open(os.path.join(directory, name + ".json"), "w", encoding="utf-8"))


def errors(report):
    """Answers other than 200 (0 counts transport errors)."""
    return sum(n for s, n in report["statuses"].items() if s != "200")


def summary(directory, only=""):
    """The table of targets; with `only` = "bus" (run.sh's ONLY_BUS), just the bus rows,
    since the other runs were skipped on purpose."""
    def load(name):
        path = os.path.join(directory, name + ".json")
        return json.load(open(path, encoding="utf-8")) if os.path.exists(path) else None

    rows = []

    def row(target, measured, ratio, passed):
        mark = "—" if passed is None else ("✓" if passed else "✗")
        rows.append((target, measured, ratio, mark))

    def at_least(target, inlet, inlet_label, base, base_label, factor, aim=None):
        if inlet is None or base is None or base <= 0:
            row(target, "not run", "", False)
            return
        ratio = inlet / base
        aim_text = f", aim {aim:g}×" if aim else ""
        row(
            target,
            f"{inlet:,.0f} {inlet_label} vs {base:,.0f} {base_label}",
            f"{ratio:.2f}× (≥ {factor:g}×{aim_text})",
            ratio >= factor,
        )

    def at_most(target, value, text, limit, limit_text, strict=False):
        """A row for a figure that must stay at or under `limit` (under it when strict)."""
        passed = value < limit if strict else value <= limit
        row(target, text, f"{value / limit:.2f}× of {limit_text}", passed)

    def get(result, *keys):
        for key in keys:
            if result is None:
                return None
            result = result[key]
        return result

    pg_ceiling, svix16, svix64 = load("pg_ceiling"), load("svix16"), load("svix64")
    pg_batched, sq_batched = load("pg_batched"), load("sq_batched")
    pg16, pg64, pg64d, pg_open = (load(n) for n in ("pg_c16", "pg_c64", "pg_c64_dups", "pg_open"))
    sq_ceiling, sq16, sq64, sq64d, sq_open = (
        load(n) for n in ("sq_ceiling", "sq_c16", "sq_c64", "sq_c64_dups", "sq_open")
    )

    at_least(
        "PostgreSQL c64 unique vs batched ceiling (64 per tx)",
        get(pg64, "accepted_per_sec"), "accepted/s",
        get(pg_batched, "webhooks_per_sec"), "webhooks/s", 0.6,
    )
    at_least(
        "PostgreSQL c16 unique vs per-transaction ceiling",
        get(pg16, "accepted_per_sec"), "accepted/s",
        get(pg_ceiling, "tps"), "tx/s", 2.5,
    )
    at_least(
        "SQLite FULL c64 unique vs its batched ceiling (FULL)",
        get(sq64, "accepted_per_sec"), "accepted/s",
        get(sq_batched, "accepted_per_sec"), "webhooks/s", 0.6,
    )
    if pg64:
        p99 = pg64["latency_ms"]["p99"]
        at_most("PostgreSQL c64 unique p99 ≤ 10 ms", p99, f"{p99:.1f} ms", 10, "10 ms")
    if pg64 and "wal_bytes" in pg64:
        inlet = wal_per(pg64, pg64["accepted"])
        at_most("WAL per accepted webhook ≤ 2.6 KB (c64)", inlet, f"{inlet:,.0f} B", 2600,
                "2,600 B")
    at_least(
        "PostgreSQL c64 unique vs ceiling (pgbench c16)",
        get(pg64, "accepted_per_sec"), "accepted/s",
        get(pg_ceiling, "tps"), "tx/s", 1.2, aim=1.5,
    )
    at_least(
        "SQLite FULL c64 unique vs NORMAL ceiling",
        get(sq64, "accepted_per_sec"), "accepted/s",
        get(sq_ceiling, "accepted_per_sec"), "tx/s", 0.9, aim=1.2,
    )
    at_least(
        "PostgreSQL c16 unique vs Svix-shaped c16",
        get(pg16, "accepted_per_sec"), "accepted/s",
        get(svix16, "tps"), "msg/s", 0.8,
    )
    at_least(
        "PostgreSQL c64 unique vs Svix-shaped c64",
        get(pg64, "accepted_per_sec"), "accepted/s",
        get(svix64, "tps"), "msg/s", 0.8,
    )
    if pg64:
        p99 = pg64["latency_ms"]["p99"]
        at_most("PostgreSQL c64 unique p99 < 40 ms", p99, f"{p99:.1f} ms", 40, "40 ms",
                strict=True)
    if pg64 and "wal_bytes" in pg64:
        inlet = wal_per(pg64, pg64["accepted"])
        parts = [f"Inlet {inlet:,.0f}"]
        for name, r in (("ceiling", pg_ceiling), ("batched", pg_batched),
                        ("Svix-shaped c64", svix64)):
            if r:
                parts.append(f"{name} {wal_per(r, r.get('webhooks', r['transactions'])):,.0f}")
        svix = wal_per(svix64, svix64["transactions"]) if svix64 else 0
        ratio = f"{inlet / svix:.2f}× Svix-shaped" if svix else ""
        whose = "this database's" if pg64.get("wal_bytes_db") is not None else "cluster"
        row(f"WAL bytes per accepted webhook (c64, {whose})", ", ".join(parts), ratio, None)
    for clients in (256, 1024):
        r = load(f"pg_c{clients}")
        if r is not None:
            failed = errors(r)
            row(f"PostgreSQL c{clients:,} keep-alive: no error, p99",
                f"{r['accepted_per_sec']:,.0f} accepted/s, p99 {r['latency_ms']['p99']:.1f} ms, "
                f"{failed} errors", "", failed == 0)
    idle, after = load("idle"), load("pg_after_idle")
    if idle is not None:
        failed = errors(after) if after else None
        row(f"{idle['asked']:,} idle connections: RSS, no error after",
            f"{idle['opened']:,} connected (up to {idle['queued']:,} waiting to be accepted), "
            f"{idle['answered']:,} answered after; RSS {idle['before_mb']} → peak "
            f"{idle['peak_mb']} MB; then c64: {failed} errors", "",
            idle["opened"] == idle["asked"] and failed == 0)
    for backend, r in (("PostgreSQL", pg_open), ("SQLite", sq_open)):
        if r is None:
            row(f"{backend} open loop 1,000/s: p99 ≤ 10 ms, no error", "not run", "", False)
            continue
        p99, failed = r["latency_ms"]["p99"], errors(r)
        row(
            f"{backend} open loop 1,000/s: p99 ≤ 10 ms, no error",
            f"p99 {p99:.1f} ms, {failed} errors, {r['requests_per_sec']:,.0f} req/s",
            f"{p99 / 10:.2f}× of 10 ms",
            p99 <= 10 and failed == 0,
        )
    for backend, dups, unique in (("PostgreSQL", pg64d, pg64), ("SQLite", sq64d, sq64)):
        target = f"{backend} c64 30 % duplicates: no error, req/s ≥ unique"
        if dups is None or unique is None:
            row(target, "not run", "", False)
            continue
        ratio, failed = dups["requests_per_sec"] / max(unique["requests_per_sec"], 1e-9), errors(dups)
        row(
            target,
            f"{dups['requests_per_sec']:,.0f} vs {unique['requests_per_sec']:,.0f} req/s, "
            f"{failed} errors",
            f"{ratio:.2f}× (≥ 1×)",
            ratio >= 1 and failed == 0,
        )
    for backend in ("postgres", "sqlite"):
        e2e = load("e2e_" + backend)
        if e2e is None:
            if backend == "postgres":  # the target; SQLite's end-to-end run is extra
                row("End to end on PostgreSQL, c64: delivered/s vs accepted/s", "not run", "",
                    False)
            continue
        drained = (
            f"drained in {e2e['drain_seconds']:.0f} s"
            if e2e["drain_seconds"] is not None
            else f"{e2e['backlog_after_drain']:,} left after {e2e['drain_timeout']} s"
        )
        at_least(
            f"End to end on {'PostgreSQL' if backend == 'postgres' else 'SQLite'}, c64: "
            "delivered/s vs accepted/s",
            e2e["delivered_per_sec"], "delivered/s", e2e["accepted_per_sec"], "accepted/s", 0.9,
        )
        row("  its backlog", f"max {e2e['backlog_max']:,}, {e2e['backlog_at_end']:,} at the "
            f"end; {drained}; sink {e2e['sink_per_sec']:,.0f}/s", "", None)
    for kind in ("nats", "amqp"):
        for backend in ("postgres", "sqlite"):
            bus = load(f"bus_{kind}_{backend}")
            if bus is None:
                continue
            name = "PostgreSQL" if backend == "postgres" else "SQLite"
            row(
                f"Onto the bus ({BROKERS[kind][0]}) on {name}, c64: published facts/s end to end",
                f"{bus['published_per_sec']:,.0f}/s ({bus['published']:,} in "
                f"{bus['seconds']:.1f} s; {BROKERS[kind][1]} holds {bus['broker_messages']:,})",
                "",
                bus["left"] == 0 and bus["broker_messages"] == bus["published"],
            )
    memory = load("memory")
    if memory:
        row("Resident memory (PostgreSQL, c16, 30 % duplicates)",
            f"{memory['first_kb'] / 1024:.1f} MB → {memory['last_kb'] / 1024:.1f} MB over "
            f"{memory['requests']:,} requests", "", None)

    if only == "bus":
        rows = [r for r in rows if r[0].startswith("Onto the bus")] or [
            ("Onto the bus", "not run", "", "✗")
        ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    print(f"{'target':<{widths[0]}}  {'measured':<{widths[1]}}  {'ratio':<{widths[2]}}")
    for target, measured, ratio, mark in rows:
        print(f"{target:<{widths[0]}}  {measured:<{widths[1]}}  {ratio:<{widths[2]}}  {mark}")


# A bus run's broker kind: its name in the summary, and what holds the published messages.
BROKERS = {"nats": ("JetStream", "stream"), "amqp": ("RabbitMQ", "queue")}


def bus(kind, load_path, out_path, published, left, took, stored):
    """One bus run's figures (bench/run.sh, `bus`): published facts/s end to end, and how
    many messages the run's stream (nats) or queue (amqp) holds."""
    load = json.load(open(load_path))
    published, left, took, stored = int(published), int(left), float(took), int(stored)
    result = {
        "kind": kind,
        "accepted_per_sec": load["accepted_per_sec"],
        "published": published,
        "left": left,
        "seconds": took,
        "published_per_sec": published / max(took, 1e-9),
        "broker_messages": stored,
        "load": load,
    }
    json.dump(result, open(out_path, "w"))
    print(f"  published {published:,} facts in {took:.1f} s: {result['published_per_sec']:,.0f}/s "
          f"end to end (accepted {result['accepted_per_sec']:,.0f}/s during the load); the "
          f"{BROKERS[kind][1]} holds {stored:,}; {left:,} not published")


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    {"pgbench": pgbench, "line": line, "summary": summary, "bus": bus,
     "median": median}[command](*args)
