#!/usr/bin/env python3
"""Moving a namespace (docs/moving.md), measured in one run:

1. Keys copied per second by `holdfast copy`, Redis -> PostgreSQL and SQLite -> PostgreSQL:
   `--keys` keys (a fifth each strings, hashes, lists, sets and sorted sets of 10 elements)
   written to the primary before mirroring begins, then copied `--repeat` times (`--restart`,
   so each copy carries every key; timed until the mirror applied the last one), then one
   `holdfast verify` (its rate, and that it finds no difference).
2. What mirroring costs the client: redis-benchmark (50 clients, unpipelined) of SET, INCR,
   LPUSH and HSET through holdfast on Redis without a mirror, with a PostgreSQL mirror and with
   a Redis mirror, and through holdfast on SQLite without and with a PostgreSQL mirror, in
   interleaved rounds. The figure to read is each mirrored target's rate as a ratio of its
   unmirrored one. After each mirrored run the mirror's queue is waited for: the time it took
   to drain is how far the mirror lagged, and writes it dropped (queue full) are counted.
3. The Redis mirror stopped (SIGSTOP) during the same runs: the client's rate and median
   latency as a ratio of the unmirrored target's, and of the same target's with its mirror
   running (a stopped mirror must not hold a client).

redis-benchmark's LPUSH writes one key (`mylist`) and HSET one hash: while mirrored, a key's
writes go to the primary one at a time (docs/moving.md), so these two show the cost on a
hot key; SET and INCR spread over 10,000 keys.

Starts its own redis-servers, PostgreSQL (initdb into a temp dir) and holdfast release build
on free loopback ports (the helpers of load.py) and stops them by PID.
Usage: benches/moving.py [--keys 20000] [--repeat 3] [--requests 20000] [--rounds 3]
[--binary BINARY]
"""

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time

# No __pycache__ beside the benchmarks: the image's build context is checked file by file.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load  # noqa: E402  (the servers' helpers, shared with the load benchmark)
from sizes import pipeline, resp  # noqa: E402

TESTS = ["set", "incr", "lpush", "hset"]


def holdfast(binary, tmp, log, name, primary, mirror=None, backends=""):
    """A holdfast whose catch-all namespace `default` is on `primary` (a backend's TOML
    body), mirrored to the backend named `mirror` if given; `backends` adds [backends.*]
    tables. (process, port, metrics port)."""
    port, metrics = load.free_port(), load.free_port()
    conf = os.path.join(tmp, f"holdfast-{name}.toml")
    mirrored = f'mirror = {{ backend = "{mirror}" }}' if mirror else ""
    with open(conf, "w") as f:
        f.write(f"""[server]
listen = "127.0.0.1:{port}"
metrics_listen = "127.0.0.1:{metrics}"
[defaults]
reply_mode = "fast"
[backends.main]
{primary}
{backends}
[[namespaces]]
name = "default"
backend = "main"
{mirrored}
""")
    proc = load.start([binary, "--config", conf], log)
    load.wait_port(port)
    return proc, port, metrics


def scrape(metrics, family):
    """The sum of `family`'s samples on a holdfast's metrics port."""
    with socket.create_connection(("127.0.0.1", metrics), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        body = b""
        while chunk := s.recv(65536):
            body += chunk
    total = 0.0
    for line in body.decode().splitlines():
        if re.match(rf"{family}(\{{| )", line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def drained(metrics, limit=600.0):
    """Waits until the mirror's queue is empty; the seconds it took."""
    began = time.time()
    while scrape(metrics, "holdfast_mirror_queued") > 0:
        if time.time() - began > limit:
            sys.exit("the mirror queue never drained")
        time.sleep(0.05)
    return time.time() - began


def seed(port, keys):
    """`keys` keys, a fifth of each type, 10 elements each."""
    commands = []
    for k in range(keys):
        kind = k % 5
        elements = [f"e{i}" for i in range(10)]
        if kind == 0:
            commands.append(resp("SET", f"s:{k}", "v" * 32))
        elif kind == 1:
            commands.append(resp("HSET", f"h:{k}", *[x for e in elements for x in (e, "v")]))
        elif kind == 2:
            commands.append(resp("RPUSH", f"l:{k}", *elements))
        elif kind == 3:
            commands.append(resp("SADD", f"set:{k}", *elements))
        else:
            commands.append(resp("ZADD", f"z:{k}", *[x for i, e in enumerate(elements) for x in (i, e)]))
    pipeline(port, commands)


def run_mover(binary, port, what, tmp):
    """`holdfast copy` or `verify` of namespace `default`; (seconds, its last line)."""
    args = [binary, what, "--namespace", "default", "--address", f"127.0.0.1:{port}"]
    if what == "copy":
        args += ["--restart", "--state", os.path.join(tmp, f"copy-{port}.state")]
    began = time.time()
    out = subprocess.run(args, capture_output=True, text=True, timeout=1800)
    took = time.time() - began
    if out.returncode != 0:
        sys.exit(f"holdfast {what} failed ({out.returncode}): {out.stderr[-2000:]}")
    # verify prints its summary on stdout; copy, its progress on stderr.
    last = (out.stdout.strip() or out.stderr.replace("\r", "\n").strip()).splitlines()
    return took, (last[-1] if last else "")


def spread(values, fmt="{:,.0f}"):
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def copies(args, binary, tmp, log, procs, redis_port, pg_port):
    pg = f'kind = "postgres"\nurl = "postgres://holdfast@127.0.0.1:{pg_port}/%s"'
    sqlite = f'kind = "sqlite"\npath = "{tmp}/outgrown.db"\nsynchronous = "normal"'
    rows = []
    for name, primary, database in [
        ("Redis -> PostgreSQL", load.redis_backend(redis_port), "copy_from_redis"),
        ("SQLite -> PostgreSQL", sqlite, "copy_from_sqlite"),
    ]:
        create_database(pg_port, database)
        if primary.startswith('kind = "redis"'):
            seed(redis_port, args.keys)
        else:
            # Written before mirroring begins, by a holdfast on the file alone.
            alone, port, _ = holdfast(binary, tmp, log, "alone", primary)
            seed(port, args.keys)
            alone.terminate()
            alone.wait()
        proc, port, metrics = holdfast(binary, tmp, log, database, primary, "pg",
                                       f"[backends.pg]\n{pg % database}")
        procs.append(proc)
        rates = []
        for _ in range(args.repeat):
            # `holdfast copy` ends when every key is queued for the mirror; a key is copied
            # once the mirror applied it, so the queue's drain counts too.
            took, _ = run_mover(binary, port, "copy", tmp)
            applied = took + drained(metrics)
            rates.append(args.keys / applied)
            print(f"{name}: copied {args.keys:,} keys in {applied:.1f} s ({took:.1f} s to queue)",
                  flush=True)
        took, last = run_mover(binary, port, "verify", tmp)
        print(f"{name}: verify {took:.1f} s: {last}", flush=True)
        compared = re.search(r"compared (\d+) keys", last)
        if "0 differ" not in last or not compared:
            sys.exit(f"{name}: verify found differences: {last}")
        rows.append((name, rates, int(compared.group(1)) / took))
        proc.terminate()
        proc.wait()
    print()
    print("| move | keys copied per second, median (min-max) | verify, keys compared per second |")
    print("|---|---|---|")
    for name, rates, verify in rows:
        print(f"| {name} | {spread(rates)} | {verify:,.0f} |")
    print()


def create_database(pg_port, name):
    subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(pg_port), "-U", "holdfast", "-d", "postgres",
                    "-c", f"CREATE DATABASE {name}"], check=True, capture_output=True)


def costs(args, binary, tmp, log, procs, redis_port, pg_port):
    second = load.free_port()
    mirror_redis = load.start_redis(second, tmp, log)
    procs.append(mirror_redis)
    load.wait_port(second)
    create_database(pg_port, "mirror_of_redis")
    create_database(pg_port, "mirror_of_sqlite")
    pg = f'kind = "postgres"\nurl = "postgres://holdfast@127.0.0.1:{pg_port}/%s"'
    sqlite = f'kind = "sqlite"\npath = "{tmp}/costs.db"\nsynchronous = "normal"'
    redis = load.redis_backend(redis_port)
    targets = {}
    for name, primary, mirror, backend in [
        ("redis", redis, None, ""),
        ("redis, PostgreSQL mirror", redis, "pg", f"[backends.pg]\n{pg % 'mirror_of_redis'}"),
        ("redis, Redis mirror", redis, "copy", f"[backends.copy]\n{load.redis_backend(second)}"),
        ("sqlite", sqlite, None, ""),
        ("sqlite, PostgreSQL mirror", sqlite, "pg", f"[backends.pg]\n{pg % 'mirror_of_sqlite'}"),
    ]:
        proc, port, metrics = holdfast(binary, tmp, log, name.replace(" ", "").replace(",", "-"),
                                       primary, mirror, backend)
        procs.append(proc)
        targets[name] = (port, metrics, mirror is not None)
    stopped = "redis, Redis mirror stopped"
    rps, p50, lag, dropped = {}, {}, {}, {}
    for _ in range(args.rounds):
        for test in TESTS:
            for name, (port, metrics, mirrored) in targets.items():
                runs = [(name, False)] + ([(stopped, True)] if name == "redis, Redis mirror" else [])
                for label, stop in runs:
                    if stop:
                        os.kill(mirror_redis.pid, signal.SIGSTOP)
                    before = scrape(metrics, "holdfast_mirror_dropped_total") if mirrored else 0
                    row = load.bench(port, test, 50, 1, 3, args.requests, 10000)
                    if stop:
                        os.kill(mirror_redis.pid, signal.SIGCONT)
                    rps.setdefault((label, test), []).append(float(row["rps"]))
                    p50.setdefault((label, test), []).append(float(row["p50_latency_ms"]))
                    if mirrored:
                        lag.setdefault((label, test), []).append(drained(metrics))
                        dropped.setdefault((label, test), []).append(
                            scrape(metrics, "holdfast_mirror_dropped_total") - before)
            print(f"round: {test} done", flush=True)
    print()
    print("| target | command | requests/s, median (min-max) | / unmirrored | p50 ms | / unmirrored "
          "| mirror drained after the run, s | writes dropped |")
    print("|---|---|---|---|---|---|---|---|")
    labels = list(targets) + [stopped]
    for label in labels:
        base = "sqlite" if label.startswith("sqlite") else "redis"
        for test in TESTS:
            key, bkey = (label, test), (base, test)
            ratio = statistics.median(rps[key]) / statistics.median(rps[bkey])
            lat = statistics.median(p50[key]) / statistics.median(p50[bkey])
            drain = spread(lag[key], "{:.1f}") if key in lag else "-"
            drop = f"{statistics.median(dropped[key]):,.0f}" if key in dropped else "-"
            print(f"| {label} | {test.upper()} | {spread(rps[key])} | {ratio:.2f} | "
                  f"{spread(p50[key], '{:.2f}')} | {lat:.2f} | {drain} | {drop} |")
    print()
    print("| command | Redis mirror stopped / running: requests/s | p50 |")
    print("|---|---|---|")
    for test in TESTS:
        on, off = ("redis, Redis mirror", test), (stopped, test)
        print(f"| {test.upper()} | {statistics.median(rps[off]) / statistics.median(rps[on]):.2f} | "
              f"{statistics.median(p50[off]) / statistics.median(p50[on]):.2f} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=["copy", "cost"])
    parser.add_argument("--binary", metavar="BINARY", help="a holdfast build to measure")
    args = parser.parse_args()
    load.BINARY = args.binary
    with load.servers() as (binary, tmp, log, procs, redis_port):
        pg, pg_port, pgdir = load.start_postgres(log)
        procs.append(pg)
        try:
            if args.only in (None, "copy"):
                copies(args, binary, tmp, log, procs, redis_port, pg_port)
            if args.only in (None, "cost"):
                costs(args, binary, tmp, log, procs, redis_port, pg_port)
        finally:
            load.stop_postgres(pgdir)


if __name__ == "__main__":
    main()
