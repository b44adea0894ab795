"""A child process for the dev-stack supervisor tests: prints a line, then waits
for SIGTERM (exit 0) — or exits with the code given as its first argument."""

import signal
import sys
import time

if len(sys.argv) > 1:
    print(f"exiting with {sys.argv[1]}", flush=True)
    sys.exit(int(sys.argv[1]))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("sleeper up", flush=True)
while True:
    time.sleep(0.1)
