"""What the bench scripts (idle-rss.py, routes-rss.py, forged-sources.py,
full-table-latency.py) read about a process, the relay's metrics and the
machine, and the loopback port they give a proxy: imported by each, not a
script of its own.

Not here: starting or stopping processes, or anything that measures
traffic.
"""

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def metrics(admin, series):
    """The values of `series` (full names with labels, as exposed) from the
    relay's admin listener on 127.0.0.1:`admin`; a series not exposed is
    left out."""
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    values = {}
    for line in text.splitlines():
        for name in series:
            if line.startswith(name + " "):
                values[name.split("{")[0]] = float(line.split()[-1])
    return values


def wait_ready(admin, relay, series):
    """Waits (at most 20 s) until the relay `relay` (a Popen) answers on its
    admin listener, and returns `metrics(admin, series)` then."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if relay.poll() is not None:
            sys.exit(f"the relay exited: {relay.returncode}")
        try:
            return metrics(admin, series)
        except OSError:
            time.sleep(0.05)
    sys.exit("the relay's admin listener never answered")


def cpu_model():
    """The CPU's model name as `lscpu` prints it."""
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"
