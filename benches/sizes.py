#!/usr/bin/env python3
"""Cost per operation as a collection grows: pushes and pops on one list, and adds to one
hash, set, sorted set and stream, measured at each size (1k, 100k and 1M elements by default)
through holdfast on SQLite (synchronous = normal) and on PostgreSQL, with the same work sent
directly to Redis for reference. The figure to read is each row's ratio of the rate at the
largest size to the rate at the smallest: a command whose cost grows with its collection
shows it at once (a scan per push made LPUSH at 100k run at 0.11 of its rate at 1k).

Starts its own redis-server, PostgreSQL (initdb into a temp dir) and holdfast release build
on free loopback ports (the helpers of load.py) and stops them by PID.
Usage: benches/sizes.py [--sizes 1000,100000,1000000] [--ops 4000] [--repeat 3]
[--only LPUSH,...] [--binary BINARY]

Each collection is filled to the next size with pipelined commands of 1,000 elements each
(streams: one XADD per entry, pipelined), then each operation is timed by redis-benchmark
(10 clients, unpipelined) `--repeat` times; the median and the spread (min-max) are printed.
The pushes and the pop alternate, so the list stays near its size.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

# No __pycache__ beside the benchmarks: the image's build context is checked file by file.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load  # noqa: E402  (the servers' helpers, shared with the load benchmark)

# (name, the collection's kind, the timed command). Members come from a keyspace far larger
# than the timed operations, so nearly every add is of a new element.
OPERATIONS = [
    ("LPUSH", "list", ["LPUSH", "big:list", "v"]),
    ("RPOP", "list", ["RPOP", "big:list"]),
    ("HSET", "hash", ["HSET", "big:hash", "t:__rand_int__", "v"]),
    ("SADD", "set", ["SADD", "big:set", "t:__rand_int__"]),
    ("ZADD", "zset", ["ZADD", "big:zset", "__rand_int__", "t:__rand_int__"]),
    ("XADD", "stream", ["XADD", "big:stream", "*", "f", "v"]),
    # Reads whose cost is documented rather than flat (docs/sql.md, "At any size"): the rank of
    # the member farthest from the end counted from, and one member drawn at random.
    ("ZREVRANK", "zset", ["ZREVRANK", "big:zset", "e0"]),
    ("SRANDMEMBER", "set", ["SRANDMEMBER", "big:set"]),
    ("LLEN", "list", ["LLEN", "big:list"]),
]
# Operations timed with fewer requests: their cost grows with the collection.
FEW = {"ZREVRANK": 40}


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def pipeline(port, commands, window=64):
    """Sends `commands` (encoded) `window` at a time on one connection, reading every reply;
    stops at the first error reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        f = s.makefile("rb")
        for start in range(0, len(commands), window):
            chunk = commands[start:start + window]
            s.sendall(b"".join(chunk))
            for _ in chunk:
                line = f.readline()
                if line.startswith(b"-"):
                    sys.exit(f"fill on port {port}: {line.decode().strip()}")
                if line[:1] == b"$" and int(line[1:]) >= 0:
                    f.read(int(line[1:]) + 2)


def fill(port, kind, start, end):
    """Adds the elements numbered [start, end) to the collection of `kind`."""
    key = f"big:{kind}"
    commands = []
    for lo in range(start, end, 1000):
        hi = min(end, lo + 1000)
        if kind == "list":
            commands.append(resp("RPUSH", key, *(f"e{i}" for i in range(lo, hi))))
        elif kind == "hash":
            commands.append(resp("HSET", key, *(x for i in range(lo, hi) for x in (f"e{i}", "v"))))
        elif kind == "set":
            commands.append(resp("SADD", key, *(f"e{i}" for i in range(lo, hi))))
        elif kind == "zset":
            commands.append(resp("ZADD", key, *(x for i in range(lo, hi) for x in (i, f"e{i}"))))
        else:
            commands.extend(resp("XADD", key, "*", "f", "v") for _ in range(lo, hi))
    pipeline(port, commands, window=4 if kind != "stream" else 256)


def length(port, kind):
    command = {"list": "LLEN", "hash": "HLEN", "set": "SCARD", "zset": "ZCARD", "stream": "XLEN"}[kind]
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(resp(command, f"big:{kind}"))
        return int(s.makefile("rb").readline()[1:])


def rate(port, command, ops):
    row = load.bench(port, command, 10, 1, 3, ops, 100_000_000)
    return float(row["rps"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1000,100000,1000000")
    parser.add_argument("--ops", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", help="comma-separated operation names")
    parser.add_argument("--binary", metavar="BINARY", help="a holdfast build to measure")
    args = parser.parse_args()
    load.BINARY = args.binary
    sizes = [int(s) for s in args.sizes.split(",")]
    ops = [o for o in OPERATIONS if not args.only or o[0] in args.only.split(",")]
    with load.servers() as (binary, tmp, log, procs, redis_port):
        pg, pg_port, pgdir = load.start_postgres(log)
        procs.append(pg)
        try:
            targets = [("redis", redis_port)]
            for name, backend in [
                ("sqlite", f'kind = "sqlite"\npath = "{tmp}/sizes.db"\nsynchronous = "normal"'),
                ("postgres", f'kind = "postgres"\nurl = "postgres://holdfast@127.0.0.1:{pg_port}/holdfast"'),
            ]:
                proc, port = load.holdfast_on(binary, tmp, name, backend, log)
                procs.append(proc)
                targets.append((name, port))
            for _, port in targets:
                load.wait_port(port)
            run(targets, sizes, ops, args)
        finally:
            load.stop_postgres(pgdir)


def run(targets, sizes, ops, args):
    rates = {}  # (target, op, size) -> [rps]
    kinds = sorted({kind for _, kind, _ in ops})
    filled = {(t, k): 0 for t, _ in targets for k in kinds}
    for size in sizes:
        for target, port in targets:
            for kind in kinds:
                began = time.time()
                fill(port, kind, filled[(target, kind)], size)
                filled[(target, kind)] = size
                print(f"{target}: {kind} filled to {length(port, kind):,} "
                      f"in {time.time() - began:.1f} s", flush=True)
        for _ in range(args.repeat):
            for name, _, command in ops:
                for target, port in targets:
                    n = FEW.get(name, args.ops)
                    rates.setdefault((target, name, size), []).append(rate(port, command, n))
    print()
    head = " | ".join(f"{s:,}" for s in sizes)
    print(f"| target | operation | {head} | largest / smallest |")
    print("|---|---|" + "---|" * len(sizes) + "---|")
    for target, _ in targets:
        for name, _, _ in ops:
            cells = []
            for size in sizes:
                got = rates[(target, name, size)]
                cells.append(f"{statistics.median(got):,.0f} ({min(got):,.0f}-{max(got):,.0f})")
            ratio = (statistics.median(rates[(target, name, sizes[-1])])
                     / statistics.median(rates[(target, name, sizes[0])]))
            print(f"| {target} | {name} | " + " | ".join(cells) + f" | {ratio:.2f} |")


if __name__ == "__main__":
    main()
