#!/usr/bin/env python3
"""Slow-client flood against a probelet binary (docs/reliability.md, "The HTTP listener").

Usage: slowloris.py BINARY N [extra run flags...]
Starts `BINARY run --manifests <empty temp dir> --listen 127.0.0.1:0`, opens N connections that
send an unfinished request head and stay silent, and prints the agent's (open fds, RSS kB) and
the /healthz status line: idle, 1 s into the flood, after 15 s (with how many slow connections
the agent still holds), and 2 s after the clients closed. Loopback only."""
import socket, subprocess, sys, time, os, tempfile, re
binary, n = sys.argv[1], int(sys.argv[2])
extra = sys.argv[3:]
d = tempfile.mkdtemp()
p = subprocess.Popen([binary, "run", "--manifests", d, "--listen", "127.0.0.1:0"] + extra, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
addr = None
while addr is None:
    line = p.stdout.readline()
    m = re.search(r"http://([0-9.:]+)/", line)
    if m: addr = m.group(1)
host, port = addr.split(":"); port = int(port)
def stats():
    fds = len(os.listdir(f"/proc/{p.pid}/fd"))
    rss = [l for l in open(f"/proc/{p.pid}/status") if l.startswith("VmRSS")][0].split()[1]
    return fds, int(rss)
def healthz():
    try:
        s = socket.create_connection((host, port), timeout=2); s.settimeout(2)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = s.recv(100); s.close()
        return data[:12].decode(errors="replace")
    except Exception as e:
        return "ERR " + type(e).__name__
time.sleep(0.5)
print("idle:", stats(), healthz())
socks = []
t0 = time.time()
for i in range(n):
    try:
        s = socket.create_connection((host, port), timeout=5)
        s.sendall(b"GET /pods HTTP/1.1\r\nHost: slow\r\nX-Slow: ")
        socks.append(s)
    except Exception as e:
        print("connect failed at", i, e); break
print(f"opened {len(socks)} in {time.time()-t0:.1f}s")
time.sleep(1)
print("during (1 s):", stats(), healthz())
time.sleep(14)
def open_count():
    alive = 0
    for s in socks:
        s.setblocking(False)
        try:
            d = s.recv(1)
            if d == b"": pass
            else: alive += 1
        except BlockingIOError: alive += 1
        except Exception: pass
    return alive
print("after 15 s: still open", open_count(), "of", len(socks), stats(), healthz())
for s in socks: s.close()
time.sleep(2)
print("after closing:", stats(), healthz())
p.terminate(); p.wait(timeout=30)
