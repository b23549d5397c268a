#!/usr/bin/env python3
"""Median start time of `BIN --help` for each binary named, interleaved.

Usage: scripts/cli-start.py [-n RUNS] BIN... (e.g. an old and a new build of
cmd/stockade). Agents call the CLI once per command, so its start counts;
interleaving keeps the machine's drift out of the comparison.
"""
import os
import statistics
import subprocess
import sys
import time

args = sys.argv[1:]
runs = 300
if len(args) >= 2 and args[0] == "-n":
    runs, args = int(args[1]), args[2:]
if not args:
    sys.exit(__doc__)
times = {b: [] for b in args}
for _ in range(runs):
    for b in args:
        t = time.perf_counter()
        subprocess.run([b, "--help"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times[b].append((time.perf_counter() - t) * 1000)
for b in args:
    print(f"{b}: median {statistics.median(times[b]):.2f} ms over {runs} runs, {os.path.getsize(b) / 1e6:.1f} MB")
