#!/usr/bin/env python3
"""Records real client traffic into the fuzz seed corpus: starts a redis-server and a
recording relay on free loopback ports, drives redis-cli (RESP2, RESP3, pipelined, inline)
and fred (examples/fred_traffic.rs) through the relay, and writes what each client connection
sent to fuzz/corpus/resp_decode/ and its commands, one argument per NUL, to
fuzz/corpus/command_parse/. Stops what it started by PID. Usage: fuzz/capture.py
"""

import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port):
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"port {port} never opened")


captured = []


def relay(listen_port, target_port):
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", listen_port))
    server.listen(16)

    def pump(src, dst, record):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if record is not None:
                    record.append(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    while True:
        client, _ = server.accept()
        backend = socket.create_connection(("127.0.0.1", target_port))
        record = []
        captured.append(record)
        threading.Thread(target=pump, args=(client, backend, record), daemon=True).start()
        threading.Thread(target=pump, args=(backend, client, None), daemon=True).start()


def split_commands(data):
    """Multibulk requests of `data` as argument lists (inline lines are skipped)."""
    out, i = [], 0
    while i < len(data) and data[i:i + 1] == b"*":
        end = data.index(b"\r\n", i)
        count = int(data[i + 1:end])
        i = end + 2
        args = []
        for _ in range(count):
            end = data.index(b"\r\n", i)
            length = int(data[i + 1:end])
            args.append(data[end + 2:end + 2 + length])
            i = end + 2 + length + 2
        out.append(args)
    return out


def main():
    redis_port, relay_port = free_port(), free_port()
    tmp = tempfile.mkdtemp(prefix="holdfast-capture-")
    redis = subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no", "--dir", tmp],
                             stdout=subprocess.DEVNULL)
    try:
        wait_port(redis_port)
        threading.Thread(target=relay, args=(relay_port, redis_port), daemon=True).start()
        wait_port(relay_port)
        cli = ["redis-cli", "-p", str(relay_port)]
        for args in (["PING"], ["SET", "k", "v", "NX", "EX", "10"], ["MGET", "k", "x"],
                     ["HSET", "h", "f", "1"], ["ZADD", "z", "-inf", "m"],
                     ["ZRANGEBYSCORE", "z", "-inf", "+inf", "WITHSCORES"],
                     ["XADD", "s", "1-1", "f", "v"], ["XRANGE", "s", "-", "+", "COUNT", "1"],
                     ["SCAN", "0", "MATCH", "k*", "COUNT", "10"], ["CLIENT", "SETNAME", "seed"],
                     ["EVAL", "return 1", "0"], ["FOO", "bar"]):
            subprocess.run(cli + args, stdout=subprocess.DEVNULL, check=True)
            subprocess.run(cli + ["-3"] + args, stdout=subprocess.DEVNULL, check=True)
        pipe = "".join(f"SET p{i} {i}\r\nGET p{i}\r\n" for i in range(20)).encode()
        subprocess.run(cli + ["--pipe"], input=pipe, stdout=subprocess.DEVNULL, check=True)
        with socket.create_connection(("127.0.0.1", relay_port)) as s:  # inline, as telnet
            s.sendall(b"SET inline \"a b\"\r\nGET inline\r\nQUIT\r\n")
            s.recv(1024)
        subprocess.run(["cargo", "run", "-q", "--example", "fred_traffic", "--",
                        f"127.0.0.1:{relay_port}"], cwd=ROOT, check=True)
        time.sleep(0.5)
    finally:
        redis.kill()
        redis.wait()

    for target in ("resp_decode", "command_parse"):
        os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    written = 0
    for record in captured:
        data = b"".join(record)
        if not data:
            continue
        name = hashlib.sha1(data).hexdigest()[:16]
        with open(os.path.join(CORPUS, "resp_decode", name), "wb") as f:
            f.write(data)
        written += 1
        try:
            commands = split_commands(data)
        except (ValueError, IndexError):
            commands = []
        for args in commands:
            joined = b"\0".join(args)
            with open(os.path.join(CORPUS, "command_parse", hashlib.sha1(joined).hexdigest()[:16]), "wb") as f:
                f.write(joined)
    print(f"{written} connections captured into {CORPUS}")


if __name__ == "__main__":
    main()
