"""Hostile, in `packages` mode: get past pybox's egress proxy, or around it."""

import errno
import json
import os
import socket
import threading
import time

params = json.load(open(os.path.join(os.environ["PYBOX_INPUT_DIR"], "verify.json")))
report = {"interfaces": sorted(os.listdir("/sys/class/net"))}
proxy = os.environ.get("HTTPS_PROXY", "")
report["proxy"] = proxy
host, _, port = proxy.split("//")[-1].rpartition(":")


def ask(line):
    try:
        with socket.create_connection((host, int(port)), 5) as sock:
            sock.sendall(line + b"\r\n\r\n")
            return sock.recv(200).split(b"\r\n")[0].decode("ascii", "replace")
    except (OSError, ValueError) as exc:
        return type(exc).__name__


# Never an allowed name: nothing here reaches a registry.
report["through_proxy"] = {
    "name off the list": ask(b"CONNECT pybox-verify.invalid:443 HTTP/1.1"),
    "IP literal": ask(b"CONNECT 127.0.0.1:443 HTTP/1.1"),
    "port 22": ask(b"CONNECT pybox-verify.invalid:22 HTTP/1.1"),
    "plain GET": ask(b"GET /simple/ HTTP/1.1\r\nHost: pybox-verify.invalid"),
}
# Hide the names asked above under a flood of refused requests (one long line
# each in the proxy's log once: 16 MiB held about 35,000): the receipt must still
# count every refusal and name the first, or say what it could not keep.
FLOOD, FLOOD_S, pad = 40_000, 45.0, "v" * 236
flood = {"sent": 0, "answered": 0}
ends = time.monotonic() + FLOOD_S


def flood_part(first):
    sent = answered = 0
    for i in range(first, FLOOD, 8):
        if time.monotonic() > ends:
            break
        sent += 1
        try:
            with socket.create_connection((host, int(port)), 5) as sock:
                sock.sendall(b"CONNECT f%05d.%s.invalid:443 HTTP/1.1\r\n\r\n" % (i, pad.encode()))
                answered += sock.recv(9).startswith(b"HTTP/1.1 ")
        except (OSError, ValueError):
            pass
    with lock:
        flood["sent"] += sent
        flood["answered"] += answered


lock = threading.Lock()
started = time.monotonic()
workers = [threading.Thread(target=flood_part, args=(k,)) for k in range(8)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
flood["seconds"] = round(time.monotonic() - started, 1)
report["flood"] = flood
gateway = None
for line in open("/proc/net/route").read().splitlines()[1:]:
    fields = line.split()
    if fields[1] == "00000000":
        gateway = socket.inet_ntoa(int(fields[2], 16).to_bytes(4, "little"))
report["direct"] = {}
# Who answered, should anything connect: both ends of the connection, and the
# link-layer neighbours the box saw (read after the attempts).
report["connected_ends"] = {}
target = params.get("listener")
for address in [a for a in ((target or {}).get("host"), gateway) if a]:
    tcp = socket.socket()
    tcp.settimeout(3)
    try:
        tcp.connect((address, (target or {}).get("tcp_port", 443)))
        report["direct"][address] = "connected"
        report["connected_ends"][address] = [tcp.getsockname(), tcp.getpeername()]
    except OSError as exc:
        report["direct"][address] = errno.errorcode.get(exc.errno, type(exc).__name__)
    finally:
        tcp.close()
report["neighbours"] = open("/proc/net/arp").read().splitlines()[1:]
own, last = set(), None
for line in open("/proc/net/fib_trie").read().splitlines():
    if "|--" in line:
        last = line.split()[-1]
    elif "host LOCAL" in line and last and not last.startswith("127."):
        own.add(last)
report["own_addresses"] = sorted(own)
answer = []


def look():
    try:
        answer.append(str(socket.getaddrinfo("pybox-verify.invalid", 443)))
    except OSError as exc:
        answer.append(f"{type(exc).__name__} {exc.errno}")


thread = threading.Thread(target=look, daemon=True)
thread.start()
thread.join(3)
report["dns"] = answer[0] if answer else "no answer in 3 s"
print(json.dumps(report))
