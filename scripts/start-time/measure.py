#!/usr/bin/env python3
"""Spawn-to-announce of a listwatch-apiserver binary: starts it N times on a free loopback
port (in memory) and times each until it prints its "listening" line, which it does once
every cache is ready. Prints the median, the fastest and the slowest run.

    python3 scripts/start-time/measure.py BINARY N [SERVER-FLAGS...]
"""
import statistics
import subprocess
import sys
import time


def main():
    binary, n, extra = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    times = []
    for _ in range(n):
        t = time.monotonic()
        p = subprocess.Popen(
            [binary, "--bind", "127.0.0.1:0", "--log-level", "warn"] + extra,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            line = p.stdout.readline()
            times.append((time.monotonic() - t) * 1000)
        finally:
            p.terminate()
            p.wait(timeout=30)
        if "listening" not in line:
            sys.exit(f"no announcement: {line!r}")
    times.sort()
    print(f"{binary}: median {statistics.median(times):.0f} ms, "
          f"fastest {times[0]:.0f} ms, slowest {times[-1]:.0f} ms ({n} runs)")


if __name__ == "__main__":
    main()
