#!/usr/bin/env python3
"""What waiting for a replica costs a client of Redis itself, without holdfast: the
reference for `benches/load.py --ha`'s `min_replicas_ack = 1` figure.

Starts a master and a replica on free loopback ports, then 50 asyncio connections each
sending 2,000 `SET`s, first alone and then each followed by `WAIT 1 1000` in the same write
(the cheapest way a client can wait for its write's replica), and prints both rates and
their ratio, three rounds. Stops both servers by PID. Usage: benches/wait_direct.py
"""

import asyncio
import socket
import subprocess
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def client(port, i, n, wait, counts):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for j in range(n):
        key = b"k%05d" % (i * 1000 + j % 1000)
        cmd = b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1\r\nv\r\n" % (len(key), key)
        if wait:
            cmd += b"*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$4\r\n1000\r\n"
        writer.write(cmd)
        await reader.readline()
        if wait:
            counts.append(int((await reader.readline())[1:]))
    writer.close()


async def run(port, wait, n=2000, clients=50):
    counts = []
    began = time.time()
    await asyncio.gather(*(client(port, i, n, wait, counts) for i in range(clients)))
    return clients * n / (time.time() - began), min(counts) if counts else None


def main():
    tmp = tempfile.mkdtemp(prefix="holdfast-wait-")
    master, replica = free_port(), free_port()
    base = ["redis-server", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp]
    procs = [subprocess.Popen(base + ["--port", str(master)], stdout=subprocess.DEVNULL),
             subprocess.Popen(base + ["--port", str(replica), "--replicaof", "127.0.0.1", str(master)],
                              stdout=subprocess.DEVNULL)]
    try:
        time.sleep(2)  # the replica's first sync
        for rnd in range(3):
            alone, _ = asyncio.run(run(master, False))
            waited, least = asyncio.run(run(master, True))
            print(f"round {rnd + 1}: SET {alone:.0f}/s, SET+WAIT {waited:.0f}/s "
                  f"(least count {least}), ratio {waited / alone:.2f}", flush=True)
    finally:
        for p in procs:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
