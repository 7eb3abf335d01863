#!/usr/bin/env python3
"""bench/resume_probe.py - how soon an answer continues after kill -9 (issue 31).

Usage: resume_probe.py REFLEXOR CONFIG DB
Starts REFLEXOR on 127.0.0.1 (port 0) with CONFIG and DB, asks one long
question, waits until part of the answer streamed, kills the server with
SIGKILL, starts it again on the same DB and measures, from the restart's
exec, the milliseconds until (1) it listens and (2) the first new text of
the answer arrives on its /messages stream (resumed with Last-Event-ID at
what was kept). Prints "listen_ms=N first_token_ms=N kept=N".
"""
import json, os, re, signal, subprocess, sys, time, urllib.request

def start(binary, conf, db):
    t0 = time.monotonic()
    p = subprocess.Popen([binary, "--config", conf, "--db", db, "--listen", "127.0.0.1:0",
                          "--log-level", "warn"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line = p.stdout.readline().decode()
    port = int(re.search(r"127\.0\.0\.1:(\d+)", line).group(1))
    return p, port, t0, time.monotonic()

def call(port, method, path, body=None):
    req = urllib.request.Request("http://127.0.0.1:%d/api/reflexor%s" % (port, path), method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"null")

def main():
    binary, conf, db = sys.argv[1:4]
    p, port, _, _ = start(binary, conf, db)
    sid = call(port, "POST", "/sessions")["id"]
    call(port, "POST", "/sessions/%s/moorex" % sid,
         {"type": "user-send-message", "content": " ".join("word%03d" % i for i in range(300))})
    mid, kept = None, 0
    for _ in range(200):  # until 200 bytes streamed (and a batch had time to be durable)
        st = call(port, "GET", "/sessions/%s" % sid)
        msgs = st.get("assistantMessages") or []
        if msgs:
            mid = msgs[-1]["id"]
            got = call(port, "GET", "/sessions/%s/messages/%s" % (sid, mid))
            if len(got.get("content", "").encode()) >= 200:
                break
        time.sleep(0.05)
    time.sleep(0.6)
    p.send_signal(signal.SIGKILL)
    p.wait()
    p, port, t0, listening = start(binary, conf, db)
    kept = len(call(port, "GET", "/sessions/%s/messages/%s" % (sid, mid)).get("content", "").encode())
    req = urllib.request.Request("http://127.0.0.1:%d/api/reflexor/sessions/%s/messages/%s" % (port, sid, mid),
                                 headers={"Accept": "text/event-stream", "Last-Event-ID": str(kept)})
    first = None
    with urllib.request.urlopen(req, timeout=30) as r:
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("data:") and '"delta":"' in line and not line.endswith('"delta":""}'):
                first = time.monotonic()
                break
    p.send_signal(signal.SIGTERM)
    p.wait()
    print("listen_ms=%.0f first_token_ms=%.0f kept=%d" % ((listening - t0) * 1000, (first - t0) * 1000, kept))

main()
