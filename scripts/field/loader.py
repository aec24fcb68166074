#!/usr/bin/env python3
"""Field-test helpers that run inside the guest (scripts/field-test.sh).

  loader.py backend PORT LABEL   a TCP backend on 127.0.0.1:PORT: reads what
                                 the relay forwards (the ClientHello) and
                                 answers "LABEL\\n", then closes
  loader.py once SNI             one connection through the relay; prints
                                 the backend's label
  loader.py load SECONDS CONC    CONC workers open connection after
                                 connection for SECONDS; prints one JSON
                                 object counting each outcome

A connection sends a real TLS ClientHello for SNI (made by Python's ssl
module, never completed: the backend is not TLS) and reads to EOF. Outcomes:
ok (a label came back), refused (ECONNREFUSED), reset (ECONNRESET/EPIPE, or
EOF with nothing), timeout (5 s without an answer), other. Everything is
bounded: connect and read time out after 5 s, `load` stops after SECONDS.
"""
import json
import socket
import socketserver
import ssl
import sys
import threading
import time

RELAY = ("127.0.0.1", 443)


def client_hello(sni):
    ctx = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname=sni)
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def one(hello):
    try:
        with socket.create_connection(RELAY, timeout=5) as s:
            s.sendall(hello)
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            return ("ok", data.decode().strip()) if data else ("reset", "eof")
    except ConnectionRefusedError:
        return ("refused", "")
    except (ConnectionResetError, BrokenPipeError):
        return ("reset", "")
    except socket.timeout:
        return ("timeout", "")
    except OSError as error:
        return ("other", str(error))


def load(seconds, workers, sni="example.com"):
    hello = client_hello(sni)
    counts = {"ok": 0, "refused": 0, "reset": 0, "timeout": 0, "other": 0}
    labels = {}
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def work():
        while time.monotonic() < deadline:
            outcome, detail = one(hello)
            with lock:
                counts[outcome] += 1
                if outcome == "ok":
                    labels[detail] = labels.get(detail, 0) + 1
            if outcome != "ok":
                time.sleep(0.01)

    threads = [threading.Thread(target=work) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts["labels"] = labels
    print(json.dumps(counts))


def backend(port, label):
    answer = (label + "\n").encode()

    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            self.request.settimeout(5)
            try:
                self.request.recv(65536)
                self.request.sendall(answer)
            except OSError:
                pass

    class Server(socketserver.ThreadingTCPServer):
        allow_reuse_address = True
        daemon_threads = True
        request_queue_size = 512

    Server(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "backend":
        backend(int(sys.argv[2]), sys.argv[3])
    elif mode == "once":
        outcome, detail = one(client_hello(sys.argv[2]))
        print(detail if outcome == "ok" else outcome)
    elif mode == "load":
        load(float(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit("unknown mode " + mode)
