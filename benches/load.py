#!/usr/bin/env python3
"""Load benchmark: the same redis-benchmark workloads sent directly to redis-server, through
twemproxy (nutcracker) and through holdfast, interleaved and repeated in one run, reported as
throughput, p50/p99 latency and holdfast/direct and holdfast/twemproxy ratios.

Starts its own redis-server, nutcracker and holdfast (release build) on free loopback ports and
stops them by PID. Usage: benches/load.py [--rounds N] [--requests N] [--quick] [--sql]

With --sql it also starts PostgreSQL (initdb into a temporary directory, as the `postgres`
user when run as root) and runs SET and GET, with and without pipelining, through holdfast on
SQLite (synchronous full and normal) and on PostgreSQL (default durability), reported as
ratios to direct Redis measured in the same rounds.

On a 2-core machine the benchmark client, the proxy and Redis share the two cores: read the
ratios, not the absolute figures.
"""

import argparse
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
    """The release binary, built (or found up to date) first."""
    subprocess.run(["cargo", "build", "--release", "--locked", "--bin", "holdfast"], cwd=ROOT, check=True)
    return os.path.join(ROOT, "target", "release", "holdfast")


def start_redis(port, tmp, log):
    """A redis-server without persistence, on loopback."""
    return start(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                  "--save", "", "--appendonly", "no", "--dir", tmp], log)


def bench(port, test, clients, pipeline, size, requests, keyspace):
    # redis-benchmark 7.0 spins forever when its port refuses: check first, and bound it.
    wait_port(port)
    cmd = [
        "timeout", "300", "redis-benchmark", "-h", "127.0.0.1", "-p", str(port),
        "-c", str(clients), "-n", str(requests), "-P", str(pipeline), "-d", str(size),
        "-r", str(keyspace), "--csv", "-t", test,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    return rows[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--quick", action="store_true", help="one round, fewer requests")
    parser.add_argument("--sql", action="store_true", help="SQLite and PostgreSQL backends too")
    parser.add_argument("--sql-requests", type=int, default=20_000)
    parser.add_argument("--modes", action="store_true",
                        help="the cost of settled and exact against fast, on Redis and SQLite")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.requests = 1, 50_000
    if args.sql:
        return sql_main(args)
    if args.modes:
        return modes_main(args)

    binary = build_holdfast()

    tmp = tempfile.mkdtemp(prefix="holdfast-bench-")
    log = open(os.path.join(tmp, "servers.log"), "w")
    redis_port, twem_port, twem_stats = (free_port() for _ in range(3))
    procs = []
    try:
        procs.append(start_redis(redis_port, tmp, log))
        wait_port(redis_port)

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
        procs.append(start(["nutcracker", "-c", twem_conf, "-s", str(twem_stats), "-a", "127.0.0.1",
                            "-o", os.path.join(tmp, "nutcracker.log")], log))

        proc, hf_port = holdfast_on(binary, tmp, "redis", redis_backend(redis_port), log)
        procs.append(proc)
        wait_port(twem_port)
        wait_port(hf_port)

        targets = [("direct", redis_port), ("twemproxy", twem_port), ("holdfast", hf_port)]
        workloads = [
            ("SET 100B", "set", 50, 1, 100),
            ("GET 100B", "get", 50, 1, 100),
            ("SET 100B P16", "set", 50, 16, 100),
            ("GET 100B P16", "get", 50, 16, 100),
            ("SET 10KB", "set", 50, 1, 10_000),
            ("MSET 10 keys", "mset", 50, 1, 100),
        ]
        results = {}
        for rnd in range(args.rounds):
            for name, test, clients, pipeline, size in workloads:
                for target, port in targets:
                    row = bench(port, test, clients, pipeline, size, args.requests, 10_000)
                    results.setdefault((name, target), []).append(row)
                    print(f"round {rnd + 1} {name:14} {target:10} {float(row['rps']):>11.0f} req/s "
                          f"p50 {row['p50_latency_ms']} ms p99 {row['p99_latency_ms']} ms", flush=True)

        def med(name, target, key):
            return statistics.median(float(r[key]) for r in results[(name, target)])

        print()
        print(f"{'workload':14} {'direct':>10} {'twemproxy':>10} {'holdfast':>10} "
              f"{'hf/direct':>9} {'hf/twem':>8}  p50 ms (d/t/h)        p99 ms (d/t/h)")
        for name, *_ in workloads:
            d, t, h = (med(name, x, "rps") for x in ("direct", "twemproxy", "holdfast"))
            p50 = "/".join(f"{med(name, x, 'p50_latency_ms'):.3f}" for x in ("direct", "twemproxy", "holdfast"))
            p99 = "/".join(f"{med(name, x, 'p99_latency_ms'):.3f}" for x in ("direct", "twemproxy", "holdfast"))
            print(f"{name:14} {d:>10.0f} {t:>10.0f} {h:>10.0f} {h / d:>9.2f} {h / t:>8.2f}  {p50:21} {p99}")
    finally:
        for p in procs:
            p.kill()
            p.wait()
        log.close()



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


def redis_backend(port):
    return f'kind = "redis"\nurl = "redis://127.0.0.1:{port}"\npool_size = 8'


def holdfast_on(binary, tmp, name, backend, log, mode="fast"):
    """A holdfast with one catch-all namespace on `backend` (its TOML body); (process, port)."""
    port, metrics = free_port(), free_port()
    conf = os.path.join(tmp, f"holdfast-{name}.toml")
    with open(conf, "w") as f:
        f.write(f"""[server]
listen = "127.0.0.1:{port}"
metrics_listen = "127.0.0.1:{metrics}"
[defaults]
reply_mode = "{mode}"
[backends.db]
{backend}
[[namespaces]]
name = "default"
backend = "db"
""")
    return start([binary, "--config", conf], log), port


def sql_main(args):
    binary = build_holdfast()
    tmp = tempfile.mkdtemp(prefix="holdfast-bench-")
    log = open(os.path.join(tmp, "servers.log"), "w")
    procs = []
    try:
        redis_port = free_port()
        procs.append(start_redis(redis_port, tmp, log))
        pg, pg_port, pgdir = start_postgres(log)
        procs.append(pg)
        targets = [("direct", redis_port)]
        for name, backend in [
            ("sqlite-full", f'kind = "sqlite"\npath = "{tmp}/full.db"\nsynchronous = "full"'),
            ("sqlite-normal", f'kind = "sqlite"\npath = "{tmp}/normal.db"\nsynchronous = "normal"'),
            ("postgres", f'kind = "postgres"\nurl = "postgres://holdfast@127.0.0.1:{pg_port}/holdfast"\npool_size = 16'),
        ]:
            proc, port = holdfast_on(binary, tmp, name, backend, log)
            procs.append(proc)
            targets.append((name, port))
        for _, port in targets:
            wait_port(port)
        workloads = [
            ("SET", "set", 50, 1),
            ("GET", "get", 50, 1),
            ("SET P16", "set", 50, 16),
            ("GET P16", "get", 50, 16),
        ]
        results = {}
        for rnd in range(args.rounds):
            for name, test, clients, pipeline in workloads:
                for target, port in targets:
                    row = bench(port, test, clients, pipeline, 100, args.sql_requests, 10_000)
                    results.setdefault((name, target), []).append(float(row["rps"]))
                    print(f"round {rnd + 1} {name:8} {target:14} {float(row['rps']):>10.0f} req/s "
                          f"p50 {row['p50_latency_ms']} ms p99 {row['p99_latency_ms']} ms", flush=True)
        names = [t for t, _ in targets]
        print()
        print(f"{'workload':9}" + "".join(f"{n:>15}" for n in names) + "   ratios to direct")
        for name, *_ in workloads:
            rps = [statistics.median(results[(name, n)]) for n in names]
            ratios = "  ".join(f"{n}={r / rps[0]:.2f}" for n, r in zip(names[1:], rps[1:]))
            print(f"{name:9}" + "".join(f"{r:>15.0f}" for r in rps) + "   " + ratios)
    finally:
        # The postmaster runs under runuser: stop it by the PID it wrote, then the rest.
        try:
            with open(os.path.join(pgdir, "data", "postmaster.pid")) as f:
                os.kill(int(f.readline()), 3)  # SIGQUIT: immediate shutdown
            time.sleep(0.5)
        except (OSError, ValueError, UnboundLocalError):
            pass
        for p in procs:
            p.kill()
            p.wait()
        log.close()


def bench_command(port, clients, requests, command):
    """redis-benchmark running one arbitrary command (keys from __rand_int__)."""
    wait_port(port)
    cmd = ["timeout", "300", "redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(clients),
           "-n", str(requests), "-r", "10000", "--csv"] + command
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return list(csv.DictReader(io.StringIO(out)))[0]


def modes_main(args):
    """Each reply mode's cost against fast, on Redis and on SQLite, interleaved in one run."""
    binary = build_holdfast()
    tmp = tempfile.mkdtemp(prefix="holdfast-bench-")
    log = open(os.path.join(tmp, "servers.log"), "w")
    procs = []
    try:
        redis_port = free_port()
        procs.append(start_redis(redis_port, tmp, log))
        wait_port(redis_port)
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
    finally:
        for p in procs:
            p.kill()
            p.wait()
        log.close()


if __name__ == "__main__":
    main()
