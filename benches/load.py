#!/usr/bin/env python3
"""Load benchmark: the same redis-benchmark workloads sent directly to redis-server, through
twemproxy (nutcracker) and through holdfast, interleaved and repeated in one run, reported as
throughput, p50/p99 latency and holdfast/direct and holdfast/twemproxy ratios.

Starts its own redis-server, nutcracker and holdfast (release build) on free loopback ports and
stops them by PID. Usage: benches/load.py [--rounds N] [--requests N] [--quick] [--only NAME]
[--sql] [--modes] [--instructions] [--ha]

Workloads: SET and GET with 50 connections, without pipelining and with 16-deep pipelines,
100-byte and 10 KB values; MGET of 10 keys; and a mixed executor-like load (HSET, HGETALL,
SADD, XADD with explicit ids, XRANGE, as five concurrent redis-benchmark runs; not through
twemproxy, which does not proxy stream commands); and SET and GET on one connection, for the
latency a proxy adds to a request that waits behind no other. For the two
proxies it also reports CPU time per request (from /proc; for the unpipelined 100-byte
workloads also split into user and system time), peak RSS, and the memory 10,000 idle
client connections add.

With --instructions it counts holdfast's instructions per request under callgrind instead
(SET and GET, 50 connections, without pipelining and 16-deep; with --sql too, holdfast on
SQLite: SET, GET, INCR, LPUSH, HSET, SADD, ZADD, and SET and GET 16-deep): repeatable where throughput
is not.

With --sql it also starts PostgreSQL (initdb into a temporary directory, as the `postgres`
user when run as root) and runs SET and GET, with and without pipelining, through holdfast on
SQLite (synchronous full and normal) and on PostgreSQL (default durability), reported as
ratios to direct Redis measured in the same rounds.

With --ha it also starts a replica and a sentinel, and compares holdfast on a `sentinel`
backend, and on a `redis` backend with `min_replicas_ack = 1`, with holdfast on a plain
`redis` backend, all on the same master; and holdfast on a `cluster` backend of a one-node
cluster with holdfast on a `redis` backend pointed at that node (SET and GET, 50
connections, with and without 16-deep pipelines).

On a 2-core machine the benchmark client, the proxy and Redis share the two cores: read the
ratios, not the absolute figures.
"""

import argparse
import hashlib
import contextlib
import csv
import glob
import pwd
import io
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, limit=15.0):
    deadline = time.time() + limit
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"*1\r\n$4\r\nPING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"port {port} never answered PING")


def start(args, log):
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def build_holdfast():
    """The release binary, built (or found up to date) first; `--binary` names another."""
    if BINARY:
        return BINARY
    subprocess.run(["cargo", "build", "--release", "--locked", "--bin", "holdfast"], cwd=ROOT, check=True)
    return os.path.join(ROOT, "target", "release", "holdfast")


def start_redis(port, tmp, log):
    """A redis-server without persistence, on loopback."""
    return start(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                  "--save", "", "--appendonly", "no", "--dir", tmp], log)


@contextlib.contextmanager
def servers():
    """What every mode starts from: holdfast's release build, a temp dir, one log for every
    server, and a redis-server on a free port; (binary, tmp, log, procs, redis_port). Every
    process put in `procs` is stopped on the way out."""
    binary = build_holdfast()
    tmp = tempfile.mkdtemp(prefix="holdfast-bench-")
    procs = []
    with open(os.path.join(tmp, "servers.log"), "w") as log:
        try:
            redis_port = free_port()
            procs.append(start_redis(redis_port, tmp, log))
            wait_port(redis_port)
            yield binary, tmp, log, procs, redis_port
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()


def only(args, name):
    """Whether `--only` (absent, or comma-separated parts of names) takes workload `name`; a
    part starting with `=` takes the workload of exactly that name (`=SET,=GET P16`)."""
    return not args.only or any(name == part[1:] if part.startswith("=") else part in name
                                for part in args.only.split(","))


def bench(port, test, clients, pipeline, size, requests, keyspace):
    """One redis-benchmark run: `test` is a `-t` name, or a command (a list, keys from
    __rand_int__)."""
    # redis-benchmark 7.0 spins forever when its port refuses: check first, and bound it.
    wait_port(port)
    cmd = [
        "timeout", "300", "redis-benchmark", "-h", "127.0.0.1", "-p", str(port),
        "-c", str(clients), "-n", str(requests), "-P", str(pipeline), "-d", str(size),
        "-r", str(keyspace), "--csv",
    ]
    cmd += ["-t", test] if isinstance(test, str) else test
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    return rows[0]


def cpu_times(pid):
    """User and system CPU time a process has used so far, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def rss_kib(pid, field="VmRSS"):
    """A process's resident memory (VmRSS) or its peak (VmHWM), in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


# The mixed workload: what a durable-execution executor sends, as five redis-benchmark runs
# at once (10 clients each, 50 in all), each on its own command.
MIXED = [
    ["HSET", "wf:__rand_int__", "state", "running", "step", "3"],
    ["HGETALL", "wf:__rand_int__"],
    ["SADD", "active", "wf:__rand_int__"],
    # An explicit id that Redis always accepts: milliseconds given, sequence filled in (a
    # refused id is an error reply, which stops redis-benchmark).
    ["XADD", "log:__rand_int__", "1-*", "event", "step-done"],
    ["XRANGE", "log:__rand_int__", "-", "+", "COUNT", "10"],
]


def bench_mixed(port, requests):
    """The MIXED commands concurrently; (total requests/s, median p50, max p99)."""
    wait_port(port)
    runs = []
    for command in MIXED:
        cmd = ["timeout", "300", "redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", "10",
               "-n", str(requests // len(MIXED)), "-r", "10000", "--csv"] + command
        runs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
    rows = []
    for command, run in zip(MIXED, runs):
        parsed = list(csv.DictReader(io.StringIO(run.communicate()[0])))
        if not parsed:
            sys.exit(f"redis-benchmark {command[0]} stopped without a result")
        rows.append(parsed[0])
    return {
        "rps": str(sum(float(r["rps"]) for r in rows)),
        "p50_latency_ms": str(statistics.median(float(r["p50_latency_ms"]) for r in rows)),
        "p99_latency_ms": str(max(float(r["p99_latency_ms"]) for r in rows)),
    }


def idle_connections(port, pid, n):
    """RSS (KiB) that `n` idle client connections add to the process `pid`."""
    before = rss_kib(pid)
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port))
            socks.append(s)
        # Each connection answers once, so each is accepted and set up.
        for s in socks:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
        for s in socks:
            s.recv(16)
        time.sleep(1)
        return rss_kib(pid) - before
    finally:
        for s in socks:
            s.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--quick", action="store_true", help="one round, fewer requests")
    parser.add_argument("--sql", action="store_true", help="SQLite and PostgreSQL backends too")
    parser.add_argument("--sql-requests", type=int, default=20_000)
    parser.add_argument("--sql-reads", action="store_true",
                        help="with --sql: SSCAN, SINTER of two 1,000-member sets, ZRANGEBYLEX")
    parser.add_argument("--modes", action="store_true",
                        help="the cost of settled and exact against fast, on Redis and SQLite")
    parser.add_argument("--only", help="run only the workloads whose name contains this "
                        "(or one of these, comma-separated)")
    parser.add_argument("--instructions", action="store_true",
                        help="holdfast's instructions per request under callgrind (repeatable)")
    parser.add_argument("--ha", action="store_true",
                        help="a Sentinel backend and min_replicas_ack against a plain Redis backend")
    parser.add_argument("--against", metavar="BINARY",
                        help="another holdfast build (a baseline) measured in the same rounds")
    parser.add_argument("--scripts", action="store_true",
                        help="EVALSHA of a three-call script against the same calls sent plain, "
                        "on Redis directly and through holdfast on Redis, SQLite and PostgreSQL")
    parser.add_argument("--binary", metavar="BINARY",
                        help="measure this holdfast build instead of building the tree's")
    args = parser.parse_args()
    if args.binary:
        global BINARY
        BINARY = os.path.abspath(args.binary)
    if args.quick:
        args.rounds, args.requests = 1, 50_000
    # Before --sql: `--instructions --sql` counts holdfast on SQLite.
    if args.instructions:
        return instructions_main(args)
    if args.sql:
        return sql_main(args)
    if args.scripts:
        return scripts_main(args)
    if args.modes:
        return modes_main(args)
    if args.ha:
        return ha_main(args)

    # The proxies inherit this limit: 10,000 idle clients need as many descriptors.
    import resource
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    with servers() as (binary, tmp, log, procs, redis_port):
        twem_port, twem_stats = (free_port() for _ in range(2))

        twem_conf = os.path.join(tmp, "nutcracker.yml")
        with open(twem_conf, "w") as f:
            f.write(f"""bench:
  listen: 127.0.0.1:{twem_port}
  hash: fnv1a_64
  distribution: ketama
  redis: true
  auto_eject_hosts: false
  server_connections: 1
  servers:
    - 127.0.0.1:{redis_port}:1
""")
        twem = start(["nutcracker", "-c", twem_conf, "-s", str(twem_stats), "-a", "127.0.0.1",
                      "-o", os.path.join(tmp, "nutcracker.log")], log)
        procs.append(twem)

        proc, hf_port = holdfast_on(binary, tmp, "redis", redis_backend(redis_port), log,
                                    server="max_clients = 20000")
        procs.append(proc)
        wait_port(twem_port)
        wait_port(hf_port)

        targets = [("direct", redis_port, None), ("twemproxy", twem_port, twem.pid),
                   ("holdfast", hf_port, proc.pid)]
        if args.against:
            # A baseline build, interleaved with this one in every round: a change's cost
            # shows as the ratio of the two, free of the run-to-run noise between runs.
            base, base_port = holdfast_on(os.path.abspath(args.against), tmp, "baseline",
                                          redis_backend(redis_port), log,
                                          server="max_clients = 20000")
            procs.append(base)
            wait_port(base_port)
            targets.append(("baseline", base_port, base.pid))
        mget = ["MGET"] + [f"key:__rand_int__" for _ in range(10)]
        # (name, test, pipeline depth, value size, connections). The one-connection runs
        # measure the latency a proxy adds to a request that does not queue behind others;
        # with 50 connections on two cores, p50 is mostly queueing (Little's law).
        workloads = [
            ("SET 100B", "set", 1, 100, 50),
            ("GET 100B", "get", 1, 100, 50),
            ("SET 100B P16", "set", 16, 100, 50),
            ("GET 100B P16", "get", 16, 100, 50),
            ("SET 10KB", "set", 1, 10_000, 50),
            ("GET 10KB", "get", 1, 10_000, 50),
            ("SET 10KB P16", "set", 16, 10_000, 50),
            ("GET 10KB P16", "get", 16, 10_000, 50),
            ("MGET 10 keys", mget, 1, 100, 50),
            ("mixed", "mixed", 1, 100, 50),
            ("SET 1 conn", "set", 1, 100, 1),
            ("GET 1 conn", "get", 1, 100, 1),
        ]
        if args.only:
            workloads = [w for w in workloads if only(args, w[0])]
        results, cpu, split = {}, {}, {}
        for rnd in range(args.rounds):
            for name, test, pipeline, size, clients in workloads:
                # 10 KB values, and one connection's requests, are fewer: the same number
                # would take minutes.
                requests = args.requests // 10 if size > 1000 or clients == 1 else args.requests
                # With a baseline, the two builds swap places every other round, so neither
                # always runs in the other's wake.
                order = targets if rnd % 2 == 0 else targets[:-2] + targets[-2:][::-1]
                for target, port, pid in (order if args.against else targets):
                    if test == "mixed" and target == "twemproxy":
                        continue  # twemproxy does not proxy streams: it closes the connection
                    used = cpu_times(pid) if pid else (0.0, 0.0)
                    if test == "mixed":
                        row = bench_mixed(port, requests)
                    elif isinstance(test, list):
                        row = bench_command(port, 50, requests, test)
                    else:
                        row = bench(port, test, clients, pipeline, size, requests, 10_000)
                    if pid:
                        now = cpu_times(pid)
                        user, system = ((b - a) / requests * 1e6 for a, b in zip(used, now))
                        cpu.setdefault((name, target), []).append(user + system)
                        split.setdefault((name, target), []).append((user, system))
                    results.setdefault((name, target), []).append(row)
                    print(f"round {rnd + 1} {name:14} {target:10} {float(row['rps']):>11.0f} req/s "
                          f"p50 {row['p50_latency_ms']} ms p99 {row['p99_latency_ms']} ms", flush=True)

        def med(name, target, key):
            rows = results.get((name, target))
            return statistics.median(float(r[key]) for r in rows) if rows else float("nan")

        print()
        print(f"{'workload':14} {'direct':>10} {'twemproxy':>10} {'holdfast':>10} "
              f"{'hf/direct':>9} {'hf/twem':>8}  {'CPU us/req t/h':>15}  p50 ms (d/t/h)        p99 ms (d/t/h)")
        for name, *_ in workloads:
            d, t, h = (med(name, x, "rps") for x in ("direct", "twemproxy", "holdfast"))
            p50 = "/".join(f"{med(name, x, 'p50_latency_ms'):.3f}" for x in ("direct", "twemproxy", "holdfast"))
            p99 = "/".join(f"{med(name, x, 'p99_latency_ms'):.3f}" for x in ("direct", "twemproxy", "holdfast"))
            c = "/".join(f"{statistics.median(cpu[(name, x)]):.2f}" if (name, x) in cpu else "n/a"
                         for x in ("twemproxy", "holdfast"))
            print(f"{name:14} {d:>10.0f} {t:>10.0f} {h:>10.0f} {h / d:>9.2f} {h / t:>8.2f}  {c:>15}  {p50:21} {p99}")
        if args.against:
            print()
            print(f"{'workload':14} {'holdfast':>10} {'baseline':>10} {'hf/base':>8}  "
                  f"{'CPU us/req h/b':>15}  spread hf/base over rounds")
            for name, *_ in workloads:
                h, b = (med(name, x, "rps") for x in ("holdfast", "baseline"))
                c = "/".join(f"{statistics.median(cpu[(name, x)]):.2f}" if (name, x) in cpu
                             else "n/a" for x in ("holdfast", "baseline"))
                ratios = sorted(float(x["rps"]) / float(y["rps"]) for x, y in
                                zip(results[(name, "holdfast")], results[(name, "baseline")]))
                print(f"{name:14} {h:>10.0f} {b:>10.0f} {h / b:>8.2f}  {c:>15}  "
                      f"{ratios[0]:.2f}-{ratios[-1]:.2f}")
        print()
        print("CPU us/req: CPU seconds per million requests, the proxy process only.")
        # Where each proxy's CPU goes: the kernel's socket work, or its own code.
        for name, _, pipeline, size, clients in workloads:
            if pipeline == 1 and size == 100 and clients == 50 and (name, "twemproxy") in split:
                parts = []
                for x in ("twemproxy", "holdfast"):
                    user = statistics.median(u for u, _ in split[(name, x)])
                    system = statistics.median(sy for _, sy in split[(name, x)])
                    parts.append(f"{x} {user:.2f}/{system:.2f}")
                print(f"{name}: CPU us/req user/system, {', '.join(parts)}")
        for name, *rest in workloads:
            if rest[-1] == 1:
                added = [1000 * (med(name, x, "p50_latency_ms") - med(name, "direct", "p50_latency_ms"))
                         for x in ("twemproxy", "holdfast")]
                print(f"{name}: p50 added {added[0]:.0f} us by twemproxy, {added[1]:.0f} us by holdfast")
        for target, port, pid in targets[1:]:
            print(f"{target}: peak RSS {rss_kib(pid, 'VmHWM') / 1024:.1f} MiB over the run")
        for target, port, pid in targets[1:]:
            added = idle_connections(port, pid, 10_000)
            print(f"{target}: 10,000 idle client connections add {added / 1024:.1f} MiB "
                  f"({added * 1024 / 10_000:.0f} bytes each)")


def as_postgres(cmd):
    return (["runuser", "-u", "postgres", "--"] + cmd) if os.geteuid() == 0 else cmd


def start_postgres(log):
    """initdb into a fresh directory and start a server on a free port; returns (proc, port, dir)."""
    bindir = sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1]
    pgdir = tempfile.mkdtemp(prefix="holdfast-bench-pg-", dir="/tmp")
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(pgdir, pw.pw_uid, pw.pw_gid)
    data = os.path.join(pgdir, "data")
    subprocess.run(as_postgres([os.path.join(bindir, "initdb"), "-D", data, "--auth=trust", "-U", "holdfast",
                                "--no-sync", "--no-locale", "-E", "UTF8"]), check=True, stdout=log, stderr=log)
    port = free_port()
    proc = subprocess.Popen(as_postgres([os.path.join(bindir, "postgres"), "-D", data,
                                         "-c", "listen_addresses=127.0.0.1", "-c", f"port={port}",
                                         "-c", f"unix_socket_directories={pgdir}"]),
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "holdfast", "-d", "postgres",
                          "-Atc", "select 1"], capture_output=True).returncode != 0:
        if time.time() > deadline:
            sys.exit("postgres never answered")
        time.sleep(0.2)
    subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "holdfast", "-d", "postgres",
                    "-c", "CREATE DATABASE holdfast"], check=True, capture_output=True)
    return proc, port, pgdir


def stop_postgres(pgdir):
    """The postmaster runs under runuser: stopped by the PID it wrote (the rest of the
    servers are stopped by `servers`)."""
    try:
        with open(os.path.join(pgdir, "data", "postmaster.pid")) as f:
            os.kill(int(f.readline()), 3)  # SIGQUIT: immediate shutdown
        time.sleep(0.5)
    except (OSError, ValueError):
        pass


def redis_backend(port):
    # The default pool (8 shared connections): a request joins the one gathering a write, so
    # fifty clients' commands still go in one write whatever the pool's size.
    return f'kind = "redis"\nurl = "redis://127.0.0.1:{port}"'


# `--binary`: a build to measure instead of this tree's release build (a baseline's, for the
# SQL comparison's `--against`).
BINARY = None

# The metrics port of each holdfast `holdfast_on` started, by its Redis port.
METRICS = {}


def group_commits(port):
    """(requests, transactions) committed so far by the holdfast on `port`'s SQL backend
    (`holdfast_group_commit_requests`' sum and count); None when it has no metrics port."""
    metrics = METRICS.get(port)
    if metrics is None:
        return None
    with socket.create_connection(("127.0.0.1", metrics), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        body = b""
        while chunk := s.recv(65536):
            body += chunk
    total = count = 0.0
    for line in body.decode().splitlines():
        if line.startswith("holdfast_group_commit_requests_sum"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith("holdfast_group_commit_requests_count"):
            count += float(line.rsplit(" ", 1)[1])
    return total, count


def holdfast_on(binary, tmp, name, backend, log, mode="fast", server="", wrap=(), defaults=""):
    """A holdfast with one catch-all namespace on `backend` (its TOML body); (process, port).
    `server` is added to its [server] table, `defaults` to [defaults]; `wrap` goes before the
    binary (valgrind)."""
    port, metrics = free_port(), free_port()
    METRICS[port] = metrics
    conf = os.path.join(tmp, f"holdfast-{name}.toml")
    with open(conf, "w") as f:
        f.write(f"""[server]
listen = "127.0.0.1:{port}"
metrics_listen = "127.0.0.1:{metrics}"
{server}
[defaults]
reply_mode = "{mode}"
{defaults}
[backends.db]
{backend}
[[namespaces]]
name = "default"
backend = "db"
""")
    return start([*wrap, binary, "--config", conf], log), port


def sql_main(args):
    with servers() as (binary, tmp, log, procs, redis_port):
        pg, pg_port, pgdir = start_postgres(log)
        procs.append(pg)
        try:
            sql_runs(args, binary, tmp, log, procs, redis_port, pg_port)
        finally:
            stop_postgres(pgdir)


def sql_runs(args, binary, tmp, log, procs, redis_port, pg_port):
    """The SQL comparison's workloads, on servers `sql_main` started."""
    targets = [("direct", redis_port)]
    normal = f'kind = "sqlite"\npath = "{tmp}/normal.db"\nsynchronous = "normal"'
    for name, backend, mode in [
        # holdfast on the same Redis: the proxy's own ceiling on this machine, in the same
        # rounds, beside which the SQL backends' ratios are read too.
        ("hf-redis", redis_backend(redis_port), "fast"),
        ("sqlite-full", f'kind = "sqlite"\npath = "{tmp}/full.db"\nsynchronous = "full"', "fast"),
        ("sqlite-normal", normal, "fast"),
        # Exact mode on the same settings (its own file): a token written with each write.
        ("sqlite-exact", normal.replace("normal.db", "exact.db"), "exact"),
        # Two connections (one group-commit writer): on 2 cores shared with PostgreSQL and
        # the client, fewer connections batch better (SET 21,600/s with 2, 16,700 with 4,
        # 14,800 with 16; GET 58,300/s with 2, 44,000 with 16).
        ("postgres", f'kind = "postgres"\nurl = "postgres://holdfast@127.0.0.1:{pg_port}/holdfast"\npool_size = 2', "fast"),
    ]:
        proc, port = holdfast_on(binary, tmp, name, backend, log, mode=mode)
        procs.append(proc)
        targets.append((name, port))
        if args.against:
            # The baseline on the same kind of backend (its own SQLite file), in the same
            # rounds: "name@base".
            proc, port = holdfast_on(os.path.abspath(args.against), tmp, name + "-base",
                                     backend.replace(".db", "-base.db"), log, mode=mode)
            procs.append(proc)
            targets.append((name + "@base", port))
    for _, port in targets:
        wait_port(port)
    if args.sql_reads:
        return sql_reads(args, targets)
    # The write shapes a run of one client's pipeline becomes one statement for (SADD, HSET,
    # DEL beside SET), the whole-collection reads likewise, and INCR, which stays a read and an upsert per command; each key and
    # member from the keyspace, so runs touch many keys. DEL deletes the SET workloads' keys.
    sadd = ["SADD", "set:__rand_int__", "m:__rand_int__"]
    hset = ["HSET", "hash:__rand_int__", "f:__rand_int__", "v"]
    delete = ["DEL", "key:__rand_int__"]
    incr = ["INCR", "counter:__rand_int__"]
    workloads = [
        ("SET", "set", 50, 1),
        ("GET", "get", 50, 1),
        # redis-benchmark's own shapes: INCR of the keyspace's counters; LPUSH to one list;
        # HSET, SADD and ZADD of the keyspace's members into one hash, set and sorted set.
        ("INCR", "incr", 50, 1),
        ("LPUSH", "lpush", 50, 1),
        ("HSET", "hset", 50, 1),
        ("SADD", "sadd", 50, 1),
        ("ZADD", "zadd", 50, 1),
        ("SET P16", "set", 50, 16),
        ("GET P16", "get", 50, 16),
        ("SADD P16", sadd, 50, 16),
        ("HSET P16", hset, 50, 16),
        # Whole-collection reads of what the two above wrote: a run is one statement.
        ("SMEMBERS P16", ["SMEMBERS", "set:__rand_int__"], 50, 16),
        ("HGETALL P16", ["HGETALL", "hash:__rand_int__"], 50, 16),
        # Point reads of the same keys, which are not GETs: a statement or two each, alone
        # and pipelined.
        ("HGET", ["HGET", "hash:__rand_int__", "f:__rand_int__"], 50, 1),
        ("HGET P16", ["HGET", "hash:__rand_int__", "f:__rand_int__"], 50, 16),
        ("SISMEMBER", ["SISMEMBER", "set:__rand_int__", "m:__rand_int__"], 50, 1),
        # Streams of a few entries each, and a run of range reads over them.
        ("XADD P16", ["XADD", "stream:__rand_int__", "*", "f", "v"], 50, 16),
        ("XRANGE P16", ["XRANGE", "stream:__rand_int__", "-", "+", "COUNT", "10"], 50, 16),
        ("DEL P16", delete, 50, 16),
        ("INCR P16", incr, 50, 16),
        # A PUBLISH with no subscriber: on SQL it counts the registry in its transaction.
        ("PUBLISH", ["PUBLISH", "ch:__rand_int__", "hello"], 50, 1),
    ]
    if args.only:
        workloads = [w for w in workloads if only(args, w[0])]
    results = {}
    groups = {}
    for rnd in range(args.rounds):
        for name, test, clients, pipeline in workloads:
            for target, port in targets:
                before = group_commits(port)
                # As many round trips whatever the depth: a pipelined run of the unpipelined
                # count ends within 0.1 s, before the proxy's batches reach their size.
                try:
                    row = bench(port, test, clients, pipeline, 100,
                                args.sql_requests * pipeline, 10_000)
                except subprocess.CalledProcessError:
                    # Past redis-benchmark's 300 s (a baseline whose push costs grow with
                    # the list): counted as 0 requests a second, the round kept.
                    row = {"rps": "0", "p50_latency_ms": "-", "p99_latency_ms": "-"}
                after = group_commits(port)
                group = ""
                if before and after and after[1] > before[1]:
                    size = (after[0] - before[0]) / (after[1] - before[1])
                    groups.setdefault((name, target), []).append(size)
                    group = f" group {size:.1f}"
                results.setdefault((name, target), []).append(float(row["rps"]))
                print(f"round {rnd + 1} {name:8} {target:14} {float(row['rps']):>10.0f} req/s "
                      f"p50 {row['p50_latency_ms']} ms p99 {row['p99_latency_ms']} ms{group}",
                      flush=True)
    names = [t for t, _ in targets]
    print()
    print(f"{'workload':9}" + "".join(f"{n:>15}" for n in names) + "   ratios to direct")
    for name, *_ in workloads:
        rps = [statistics.median(results[(name, n)]) for n in names]
        ratios = "  ".join(f"{n}={r / rps[0]:.2f}" for n, r in zip(names[1:], rps[1:]))
        print(f"{name:9}" + "".join(f"{r:>15.0f}" for r in rps) + "   " + ratios)
    # Each round's ratio to direct Redis, and to holdfast on Redis in the same round: the
    # spread, and how much of a gap is the SQL backend's rather than the proxy's.
    print()
    print("per-round ratios to direct Redis (median, min-max) / to holdfast on Redis:")
    for name, *_ in workloads:
        direct = results[(name, "direct")]
        proxy = results[(name, "hf-redis")]
        parts = []
        for n in names[1:]:
            if n == "hf-redis":
                continue
            to_direct = [r / d for r, d in zip(results[(name, n)], direct)]
            to_proxy = [r / p for r, p in zip(results[(name, n)], proxy)]
            parts.append(f"{n}={statistics.median(to_direct):.2f} ({min(to_direct):.2f}-"
                         f"{max(to_direct):.2f}) / {statistics.median(to_proxy):.2f}")
        ceiling = [p / d for p, d in zip(proxy, direct)]
        print(f"  {name:9} hf-redis={statistics.median(ceiling):.2f} ({min(ceiling):.2f}-"
              f"{max(ceiling):.2f})  " + "  ".join(parts))
    # Exact mode against fast on the same SQLite settings, round by round.
    if "sqlite-exact" in names:
        print()
        print("exact mode / fast on SQLite (synchronous normal), median (min-max) of rounds:")
        for name, *_ in workloads:
            each = [e / f for e, f in zip(results[(name, "sqlite-exact")],
                                          results[(name, "sqlite-normal")])]
            print(f"  {name:9} {statistics.median(each):.2f} ({min(each):.2f}-{max(each):.2f})")
    # Requests per group-commit transaction (holdfast_group_commit_requests), median of the
    # rounds: how much each workload batched.
    print()
    print("requests per group commit (median of rounds):")
    for name, *_ in workloads:
        sizes = [f"{n}={statistics.median(groups[(name, n)]):.1f}"
                 for n in names[1:] if (name, n) in groups]
        if sizes:
            print(f"  {name:9} " + "  ".join(sizes))


def ha_main(args):
    """Highly available Redis against a plain one, on the same master, interleaved: holdfast
    with a `redis` backend, with a `sentinel` backend naming that master (one sentinel), and
    with a `redis` backend and `min_replicas_ack = 1` (one replica)."""
    with servers() as (binary, tmp, log, procs, redis_port):
        replica_port, sentinel_port = free_port(), free_port()
        procs.append(start(["redis-server", "--port", str(replica_port), "--bind", "127.0.0.1",
                            "--save", "", "--appendonly", "no", "--dir", tmp,
                            "--replicaof", "127.0.0.1", str(redis_port)], log))
        conf = os.path.join(tmp, "sentinel.conf")
        with open(conf, "w") as f:
            f.write(f"port {sentinel_port}\nbind 127.0.0.1\ndir {tmp}\n"
                    f"sentinel monitor mymaster 127.0.0.1 {redis_port} 1\n"
                    "sentinel down-after-milliseconds mymaster 30000\n")
        procs.append(start(["redis-server", conf, "--sentinel"], log))
        wait_port(replica_port)
        wait_port(sentinel_port)
        sentinel = (f'kind = "sentinel"\nmaster_name = "mymaster"\n'
                    f'sentinels = ["127.0.0.1:{sentinel_port}"]')
        # A one-node cluster (every slot on one node), and a plain redis backend on it.
        node_port, bus_port = free_port(), free_port()
        procs.append(start(["redis-server", "--port", str(node_port), "--bind", "127.0.0.1",
                            "--save", "", "--appendonly", "no", "--dir", tmp,
                            "--cluster-enabled", "yes", "--cluster-port", str(bus_port),
                            "--cluster-config-file", os.path.join(tmp, "nodes.conf")], log))
        wait_port(node_port)
        subprocess.run(["redis-cli", "-p", str(node_port), "CLUSTER", "ADDSLOTSRANGE", "0", "16383"],
                       check=True, capture_output=True)
        deadline = time.time() + 20
        while b"cluster_state:ok" not in subprocess.run(
                ["redis-cli", "-p", str(node_port), "CLUSTER", "INFO"], capture_output=True).stdout:
            if time.time() > deadline:
                sys.exit("the one-node cluster never came up")
            time.sleep(0.2)
        cluster = f'kind = "cluster"\nnodes = ["127.0.0.1:{node_port}"]'
        targets = [("direct", redis_port)]
        for name, backend, defaults in [
            ("redis", redis_backend(redis_port), ""),
            ("sentinel", sentinel, ""),
            ("redis-ack1", redis_backend(redis_port), "min_replicas_ack = 1"),
            ("node", redis_backend(node_port), ""),
            ("cluster", cluster, ""),
        ]:
            proc, port = holdfast_on(binary, tmp, name, backend, log, defaults=defaults)
            procs.append(proc)
            targets.append((name, port))
        for _, port in targets:
            wait_port(port)
        time.sleep(2)  # the replica's first sync
        workloads = [("SET", "set", 1), ("GET", "get", 1), ("SET P16", "set", 16),
                     ("GET P16", "get", 16)]
        if args.only:
            workloads = [w for w in workloads if only(args, w[0])]
        results = {}
        for rnd in range(args.rounds):
            for name, test, pipeline in workloads:
                for target, port in targets:
                    row = bench(port, test, 50, pipeline, 100, args.requests, 10_000)
                    results.setdefault((name, target), []).append(float(row["rps"]))
                    print(f"round {rnd + 1} {name:8} {target:11} {float(row['rps']):>10.0f} req/s "
                          f"p50 {row['p50_latency_ms']} ms p99 {row['p99_latency_ms']} ms", flush=True)
        print()
        print(f"{'workload':9}" + "".join(f"{n:>12}" for n, _ in targets)
              + "   sentinel/redis (spread)   ack1/redis (spread)       cluster/node (spread)")
        for name, *_ in workloads:
            rps = [statistics.median(results[(name, n)]) for n, _ in targets]

            def spread(a, b):
                r = sorted(x / y for x, y in zip(results[(name, a)], results[(name, b)]))
                return f"{statistics.median(r):.2f} ({r[0]:.2f}-{r[-1]:.2f})"
            print(f"{name:9}" + "".join(f"{r:>12.0f}" for r in rps)
                  + f"   {spread('sentinel', 'redis'):24}  {spread('redis-ack1', 'redis'):24}"
                  + f"  {spread('cluster', 'node')}")


def send_raw(port, *commands):
    """Sends whole commands over one connection and reads one reply each (seeding)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        out = b"".join(b"*%d\r\n" % len(c) + b"".join(
            b"$%d\r\n%s\r\n" % (len(a), a) for a in (x.encode() for x in c)) for c in commands)
        s.sendall(out)
        f = s.makefile("rb")
        for _ in commands:
            line = f.readline()
            if line.startswith(b"-"):
                sys.exit(f"seeding failed: {line!r}")
            if line[:1] in (b"$",) and int(line[1:]) >= 0:
                f.read(int(line[1:]) + 2)


def sql_reads(args, targets):
    """The read paths SQL backends gained, each target seeded the same way: two sets of
    1,000 members sharing 500, a sorted set of 1,000 members at one score."""
    members = [f"m{i:04}" for i in range(1000)]
    for _, port in targets:
        send_raw(port, ["DEL", "s1", "s2", "zl"],
                 ["SADD", "s1"] + members,
                 ["SADD", "s2"] + members[500:] + [f"n{i:04}" for i in range(500)],
                 ["ZADD", "zl"] + [x for m in members for x in ("0", m)])
    workloads = [
        ("SSCAN", ["SSCAN", "s1", "0", "COUNT", "100"]),
        ("SINTER", ["SINTER", "s1", "s2"]),
        ("ZRANGEBYLEX", ["ZRANGEBYLEX", "zl", "[m0100", "(m0200"]),
    ]
    results = {}
    for rnd in range(args.rounds):
        for name, command in workloads:
            for target, port in targets:
                row = bench_command(port, 50, args.sql_requests // 4, command)
                results.setdefault((name, target), []).append(float(row["rps"]))
                print(f"round {rnd + 1} {name:12} {target:14} {float(row['rps']):>10.0f} req/s",
                      flush=True)
    names = [t for t, _ in targets]
    print()
    print(f"{'workload':12}" + "".join(f"{n:>15}" for n in names) + "   ratios to direct (spread)")
    for name, _ in workloads:
        rps = [statistics.median(results[(name, n)]) for n in names]
        def spread(n):
            d = results[(name, "direct")]
            r = [x / y for x, y in zip(results[(name, n)], d)]
            return f"{min(r):.2f}-{max(r):.2f}"
        ratios = "  ".join(f"{n}={r / rps[0]:.2f} ({spread(n)})" for n, r in zip(names[1:], rps[1:]))
        print(f"{name:12}" + "".join(f"{r:>15.0f}" for r in rps) + "   " + ratios)


def bench_command(port, clients, requests, command):
    """redis-benchmark running one arbitrary command (keys from __rand_int__)."""
    wait_port(port)
    cmd = ["timeout", "300", "redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(clients),
           "-n", str(requests), "-r", "10000", "--csv"] + command
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return list(csv.DictReader(io.StringIO(out)))[0]


THREE_CALLS = ("redis.call('incr', KEYS[1]); redis.call('get', KEYS[1]); "
               "return redis.call('expire', KEYS[1], 100)")


def scripts_main(args):
    """EVALSHA of a script of three calls (INCR, GET, EXPIRE of one key) against the same
    three calls sent plain, each target in the same interleaved rounds: Redis directly, and
    holdfast on Redis, SQLite (synchronous = normal) and PostgreSQL. The plain figure is
    triples per second, 1 / (1/INCR + 1/GET + 1/EXPIRE) of the three commands' rates."""
    with servers() as (binary, tmp, log, procs, redis_port):
        pg, pg_port, pgdir = start_postgres(log)
        procs.append(pg)
        try:
            targets = [("direct", redis_port)]
            for name, backend in [
                ("hf-redis", redis_backend(redis_port)),
                ("sqlite", f'kind = "sqlite"\npath = "{tmp}/scripts.db"\nsynchronous = "normal"'),
                ("postgres", f'kind = "postgres"\nurl = "postgres://holdfast@127.0.0.1:{pg_port}/holdfast"\npool_size = 2'),
            ]:
                proc, port = holdfast_on(binary, tmp, name, backend, log)
                procs.append(proc)
                wait_port(port)
                targets.append((name, port))
            sha = hashlib.sha1(THREE_CALLS.encode()).hexdigest()
            for _, port in targets:
                send_raw(port, ["SCRIPT", "LOAD", THREE_CALLS])
            workloads = {
                "EVALSHA": ["EVALSHA", sha, "1", "k:__rand_int__"],
                "INCR": ["INCR", "k:__rand_int__"],
                "GET": ["GET", "k:__rand_int__"],
                "EXPIRE": ["EXPIRE", "k:__rand_int__", "100"],
            }
            results = {}
            for rnd in range(args.rounds):
                for name, command in workloads.items():
                    for target, port in targets:
                        row = bench_command(port, 50, args.sql_requests, command)
                        results.setdefault((name, target), []).append(float(row["rps"]))
                        print(f"round {rnd + 1} {name:8} {target:9} {float(row['rps']):>10.0f} req/s",
                              flush=True)
        finally:
            stop_postgres(pgdir)
    def triples(target, i):
        return 1 / sum(1 / results[(n, target)][i] for n in ("INCR", "GET", "EXPIRE"))
    print()
    print(f"{'target':10}{'EVALSHA/s':>12}{'3 plain/s':>12}   script/plain (spread)   "
          "EVALSHA to direct Redis's")
    for target, _ in targets:
        script = results[("EVALSHA", target)]
        plain = [triples(target, i) for i in range(args.rounds)]
        ratio = [a / b for a, b in zip(script, plain)]
        to_direct = [a / b for a, b in zip(script, results[("EVALSHA", "direct")])]
        print(f"{target:10}{statistics.median(script):>12.0f}{statistics.median(plain):>12.0f}   "
              f"{statistics.median(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f})"
              f"          {statistics.median(to_direct):.2f} ({min(to_direct):.2f}-{max(to_direct):.2f})")


def modes_main(args):
    """Each reply mode's cost against fast, on Redis and on SQLite, interleaved in one run."""
    with servers() as (binary, tmp, log, procs, redis_port):
        targets = []
        for backend_name, backend in [
            ("redis", redis_backend(redis_port)),
            ("sqlite", f'kind = "sqlite"\npath = "{tmp}/MODE.db"\nsynchronous = "normal"'),
        ]:
            for mode in ("fast", "settled", "exact"):
                proc, port = holdfast_on(binary, tmp, f"{backend_name}-{mode}",
                                         backend.replace("MODE", mode), log, mode)
                procs.append(proc)
                targets.append((backend_name, mode, port))
        for _, _, port in targets:
            wait_port(port)
        workloads = [
            ("INCR", ["INCR", "counter:__rand_int__"]),
            ("SADD", ["SADD", "set:__rand_int__", "member"]),
            ("DEL", ["DEL", "key:__rand_int__"]),
            ("SETNX", ["SETNX", "nx:__rand_int__", "v"]),
        ]
        results = {}
        for rnd in range(args.rounds):
            for name, command in workloads:
                for backend_name, mode, port in targets:
                    n = args.requests if backend_name == "redis" else args.sql_requests
                    row = bench_command(port, 50, n, command)
                    results.setdefault((name, backend_name, mode), []).append(float(row["rps"]))
                    print(f"round {rnd + 1} {name:6} {backend_name:7} {mode:8} {float(row['rps']):>10.0f} req/s "
                          f"p50 {row['p50_latency_ms']} ms", flush=True)
        print()
        print(f"{'workload':9} {'backend':8} {'fast':>9} {'settled':>9} {'exact':>9}  settled/fast exact/fast")
        for name, _ in workloads:
            for backend_name in ("redis", "sqlite"):
                fast, settled, exact = (statistics.median(results[(name, backend_name, m)])
                                        for m in ("fast", "settled", "exact"))
                print(f"{name:9} {backend_name:8} {fast:>9.0f} {settled:>9.0f} {exact:>9.0f}  "
                      f"{settled / fast:>12.2f} {exact / fast:>10.2f}")


def instructions_main(args):
    """Instructions per request of holdfast under `valgrind --tool=callgrind`, one fresh
    holdfast per workload: unlike wall-clock figures, the same from run to run within about
    1%, so a change of a few percent shows. Start-up and shutdown are in the count;
    with 100,000 requests and more they are under 1% of it."""
    if subprocess.run(["which", "valgrind"], capture_output=True).returncode != 0:
        sys.exit("--instructions needs valgrind (apt-get install valgrind)")
    with servers() as (binary, tmp, log, procs, redis_port):
        workloads = [
            ("GET 100B", "get", 1, 100_000),
            ("SET 100B", "set", 1, 100_000),
            ("GET 100B P16", "get", 16, 400_000),
            ("SET 100B P16", "set", 16, 400_000),
        ]
        backend = redis_backend(redis_port)
        if args.sql:
            # holdfast on SQLite (synchronous = normal): the SQL comparison's workloads, fewer
            # requests (SQLite under callgrind is slow); a fresh file for each holdfast.
            workloads = [
                ("SET", "set", 1, 20_000),
                ("GET", "get", 1, 20_000),
                ("INCR", ["INCR", "counter:__rand_int__"], 1, 20_000),
                ("LPUSH", ["LPUSH", "list:__rand_int__", "v"], 1, 20_000),
                ("HSET", ["HSET", "hash:__rand_int__", "f:__rand_int__", "v"], 1, 20_000),
                ("SADD", ["SADD", "set:__rand_int__", "m:__rand_int__"], 1, 20_000),
                ("ZADD", ["ZADD", "zset:__rand_int__", "1", "m:__rand_int__"], 1, 20_000),
                ("SET P16", "set", 16, 40_000),
                ("GET P16", "get", 16, 40_000),
            ]
        for name, test, pipeline, requests in workloads:
            if not only(args, name):
                continue
            builds = [("holdfast", binary)]
            if args.against:
                builds.append(("baseline", os.path.abspath(args.against)))
            for label, build in builds:
                tag = name.replace(" ", "-")
                out = os.path.join(tmp, f"callgrind-{label}-{tag}.out")
                if args.sql:
                    backend = (f'kind = "sqlite"\npath = "{tmp}/callgrind-{label}-{tag}.db"\n'
                               'synchronous = "normal"')
                proc, port = holdfast_on(build, tmp, "callgrind", backend, log,
                                         wrap=("valgrind", "--tool=callgrind",
                                               f"--callgrind-out-file={out}"))
                procs.append(proc)
                wait_port(port, limit=60.0)
                bench(port, test, 50, pipeline, 100, requests, 10_000)
                proc.send_signal(2)  # SIGINT: a clean exit, so callgrind writes its totals
                proc.wait(timeout=120)
                with open(out) as f:
                    total = next(int(line.split()[1]) for line in f
                                 if line.startswith(("summary:", "totals:")))
                print(f"{name:14} {label:9} {total / requests:>8.0f} instructions per request",
                      flush=True)


if __name__ == "__main__":
    main()
