#!/usr/bin/env python3
"""A minimal aioquic client: sends its first flight to HOST:PORT with SNI NAME.

Usage: aioquic-client.py PORT NAME VERSION   (VERSION: 1 or 2)
It never gets an answer from the capture listener and gives up after 2 s.
"""

import asyncio
import sys

from aioquic.asyncio import connect
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.packet import QuicProtocolVersion


async def main(port, name, version):
    config = QuicConfiguration(is_client=True, alpn_protocols=["h3"], server_name=name)
    config.supported_versions = [
        QuicProtocolVersion.VERSION_2 if version == 2 else QuicProtocolVersion.VERSION_1
    ]
    try:
        async with connect("127.0.0.1", port, configuration=config, wait_connected=True):
            pass
    except Exception:
        pass


try:
    asyncio.run(asyncio.wait_for(main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3])), 2))
except (asyncio.TimeoutError, TimeoutError):
    pass
