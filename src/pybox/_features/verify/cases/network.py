"""Hostile: find a way out to the network, and reach a listener on the host."""

import errno
import json
import os
import socket

params = json.load(open(os.path.join(os.environ["PYBOX_INPUT_DIR"], "verify.json")))
report = {}
report["interfaces"] = sorted(os.listdir("/sys/class/net"))
report["ipv4_routes"] = open("/proc/net/route").read().splitlines()[1:]
report["ipv6_route_devices"] = sorted(
    {line.split()[-1] for line in open("/proc/net/ipv6_route") if line.strip()}
)
try:
    resolv = open("/etc/resolv.conf").read()
except OSError:
    resolv = ""
report["nameservers"] = [line for line in resolv.splitlines() if line.startswith("nameserver")]

# .invalid never resolves anywhere (RFC 6761), so this asks only whether a resolver answers.
try:
    report["dns"] = str(socket.getaddrinfo("pybox-verify.invalid", 80))
except socket.gaierror as exc:
    report["dns"] = f"gaierror {exc.errno}"

# The listener pybox verify started on this machine's docker bridge (never any other address).
target = params.get("listener")
if target:
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.settimeout(3)
    try:
        tcp.connect((target["host"], target["tcp_port"]))
        tcp.sendall(b"escaped")
        report["tcp_connect"] = "connected"
    except OSError as exc:
        report["tcp_connect"] = errno.errorcode.get(exc.errno, str(exc))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        udp.sendto(b"escaped", (target["host"], target["udp_port"]))
        report["udp_send"] = "sent"
    except OSError as exc:
        report["udp_send"] = errno.errorcode.get(exc.errno, str(exc))
print(json.dumps(report))
