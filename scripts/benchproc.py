"""What the memory scripts (idle-rss.py, routes-rss.py) read about a
process and the loopback port they give a proxy: imported by each, not a
script of its own.

Not here: starting or stopping processes, or anything that measures
traffic.
"""

import socket
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
