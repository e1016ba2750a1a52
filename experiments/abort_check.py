"""A real `kevlike serve` (kevlike-default, --timeout 2): a 3,000-token request that times out (503), and a
one-token request sent 1.5 s after it. Before kevlike/model/abort.py the short one waited for the long pass and
got 503 too; after it, the long pass is abandoned and the short one is answered. Prints both (status, seconds) and
/health. Run: `OMP_NUM_THREADS=1 python experiments/abort_check.py` (needs the default backbone, `kevlike fetch`)."""
import json, subprocess, sys, time, threading, urllib.request, urllib.error
port = 8771
srv = subprocess.Popen([sys.executable, "-m", "kevlike", "serve", "--port", str(port), "--threads", "2", "--timeout", "2"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
def post(body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/systemone", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            code = r.status; r.read()
    except urllib.error.HTTPError as e:
        code = e.code
    return code, time.perf_counter() - t
for _ in range(600):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1); break
    except Exception:
        time.sleep(0.5)
q = {"u": {"type": "noul", "instructions": "Is a fox mentioned?"}}
print("warm", post({"state": "A fox.", "questions": q}))
big = {"state": "The quick brown fox jumps over the lazy dog. " * 300, "questions": q}
res = {}
t = threading.Thread(target=lambda: res.setdefault("big", post(big))); t.start()
time.sleep(1.5)
res["small"] = post({"state": "y", "questions": q})
t.join()
print(res)
time.sleep(1); print(json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/health").read()))
srv.terminate(); srv.wait(30)
