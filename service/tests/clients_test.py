#!/usr/bin/python3
"""The client examples (examples/clients/: Node, Python, Go) run against a live sluiced on a
private redis-server (free loopback ports), on examples/config plus a domain whose lease_ttl
is short enough to see heartbeats. What must hold, for the language given:
- four sign-in checks of one account (3/min, closed): three "allowed (200)", then the
  429 branch with Retry-After and the RateLimit header named;
- a lease held for 2.5 s with a 1 s lease_ttl: while it runs the slot stays taken past its
  ttl (a second acquire gets 429 and the admin list shows the lease: the heartbeats
  worked), at least three heartbeats are printed, and once the example exits the slot is
  free (the admin list is empty and an acquire gets 201): the release in the finally;
- Redis stopped, so sluiced answers 503 for the closed sign-in limit: the example's
  failure choice decides (allowed with --fail open, refused with --fail closed);
- a "sluiced" that accepts connections and never answers: refused by --fail closed within
  a second (the short timeout);
- sluiced stopped: allowed by --fail open, refused by --fail closed.

A language whose toolchain is not installed is skipped with a message (exit 77, CTest's
SKIP_RETURN_CODE), never passed silently. Go builds with GOCACHE under --work-dir and
GOPROXY=off (the example uses the standard library only).

Usage: clients_test.py --lang node|python|go --sluiced PATH --source-dir DIR --work-dir DIR"""
import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_sluiced import LiveSluiced, clear_of_minute_boundary, request  # noqa: E402

SKIP = 77
# The examples' timeout (SLUICED_TIMEOUT_MS) for calls a live sluiced answers: generous, for a
# loaded test machine where a cold `node` takes a second to load its fetch. The silent
# sluiced is given the examples' own default, 250 ms.
LIVE_TIMEOUT_MS = 3000
ADMIN_TOKEN = "clients-test-admin"
LEASE_DOMAIN = """\
domain: clients
descriptors:
  - key: jobs
    descriptors:
      - key: account
        algorithm: concurrency
        lease_ttl: 1s
        failure_mode: closed
        rate_limit: {name: jobs, requests_per_unit: 1}
"""


def command_for(lang, source_dir, work_dir):
    """The argv prefix that runs the example, or exits 77 naming what is missing."""
    examples = os.path.join(source_dir, "examples", "clients")
    if lang == "python":
        return ["/usr/bin/python3", os.path.join(examples, "python", "sluiced_client.py")]
    if lang == "node":
        node = shutil.which("node") or shutil.which("nodejs")
        if not node:
            print("SKIP: node is not installed (Debian: apt-get install nodejs; "
                  "scripts/setup.sh installs it)")
            sys.exit(SKIP)
        version = subprocess.run([node, "--version"], capture_output=True, text=True).stdout
        if int(version.lstrip("v").split(".")[0]) < 18:
            print("SKIP: node %s has no global fetch (18 or later needed)" % version.strip())
            sys.exit(SKIP)
        return [node, os.path.join(examples, "node", "sluiced_client.mjs")]
    go = shutil.which("go")
    if not go:
        print("SKIP: go is not installed (Debian: apt-get install golang-go; "
              "scripts/setup.sh installs it)")
        sys.exit(SKIP)
    binary = os.path.join(work_dir, "sluiced-client-go")
    env = dict(os.environ, GOCACHE=os.path.join(work_dir, "go-cache"),
               GOPATH=os.path.join(work_dir, "go-path"), GOPROXY="off", GOFLAGS="",
               GO111MODULE="off", GOTOOLCHAIN="local")
    t0 = time.monotonic()
    subprocess.run([go, "build", "-o", binary, os.path.join(examples, "go", "main.go")],
                   env=env, check=True)
    print("go build: %.1f s" % (time.monotonic() - t0))
    return [binary]


class Example:
    def __init__(self, argv):
        self.argv = argv

    def run(self, *args, timeout_ms=LIVE_TIMEOUT_MS):
        t0 = time.monotonic()
        r = subprocess.run(self.argv + list(args), capture_output=True, text=True, timeout=10,
                           env=dict(os.environ, SLUICED_TIMEOUT_MS=str(timeout_ms)))
        elapsed = time.monotonic() - t0
        out = r.stdout.strip()
        print("$ %s %s\n%s  (%.2f s)" % (os.path.basename(self.argv[-1]), " ".join(args), out,
                                        elapsed), flush=True)
        assert r.returncode == 0, "exit %d: %s" % (r.returncode, r.stderr)
        return out, elapsed

    def check(self, base, fail, *entries, timeout_ms=LIVE_TIMEOUT_MS):
        return self.run("check", base, "shop", "--fail", fail, *entries, timeout_ms=timeout_ms)


def expect(what, out, pattern):
    assert re.search(pattern, out), "%s: expected /%s/, got:\n%s" % (what, pattern, out)


def admin_leases(s, account):
    status, _, body = request(s.admin, "POST", "/admin/leases/list",
                              {"domain": "clients", "entries": [{"key": "jobs"},
                                                                {"key": "account",
                                                                 "value": account}]},
                              {"Authorization": "Bearer " + ADMIN_TOKEN})
    assert status == 200, (status, body)
    import json
    return len(json.loads(body)["leases"])


def acquire(s, account):
    status, _, body = request(s.http, "POST", "/v1/leases",
                              {"domain": "clients",
                               "entries": [{"key": "jobs"}, {"key": "account", "value": account}]})
    return status, body


def checks(ex, base, account):
    clear_of_minute_boundary()
    for i in range(3):
        out, _ = ex.check(base, "closed", "route=sign_in", "account=" + account)
        expect("sign-in #%d" % (i + 1), out, r'^allowed \(200\) RateLimit: "sign_in";r=%d;t=\d+$'
               % (2 - i))
    out, _ = ex.check(base, "closed", "route=sign_in", "account=" + account)
    expect("sign-in #4", out, r'^refused \(429\): retry after [1-9]\d* s; '
           r'RateLimit: "sign_in";r=0;t=\d+; RateLimit-Policy: "sign_in";q=3;w=60$')


def lease(ex, s, base, account):
    p = subprocess.Popen(ex.argv + ["lease", base, "clients", "--hold-ms", "2500", "jobs",
                                    "account=" + account],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, SLUICED_TIMEOUT_MS=str(LIVE_TIMEOUT_MS)))
    try:
        # Well past the 1 s lease_ttl: held only if the heartbeats landed.
        time.sleep(1.8)
        assert p.poll() is None, "the example ended early: %s %s" % p.communicate()
        held_by_admin = admin_leases(s, account)
        status, body = acquire(s, account)
        out, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    print(out.strip())
    assert p.returncode == 0, "exit %d: %s" % (p.returncode, err)
    assert held_by_admin == 1, "admin list during the hold: %d leases" % held_by_admin
    assert status == 429, "a second acquire during the hold: %d %r" % (status, body)
    expect("lease", out, r"lease acquired \(ttl 1000 ms, heartbeat every 333 ms\)")
    beats = len(re.findall(r"heartbeat: held, expires in \d+ ms", out))
    assert beats >= 3, "%d heartbeats in 2.5 s at a 1 s lease_ttl" % beats
    expect("lease", out, r"lease released \(204\)")
    assert admin_leases(s, account) == 0, "the lease is still listed after the example ended"
    status, body = acquire(s, account)
    assert status == 201, "an acquire after the example ended: %d %r" % (status, body)
    print("ok  lease held %d heartbeats past its ttl, then released: the slot is free" % beats)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lang", choices=["node", "python", "go"], required=True)
    ap.add_argument("--sluiced", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--work-dir", required=True)
    args = ap.parse_args()
    args.work_dir = os.path.abspath(args.work_dir)
    os.makedirs(args.work_dir, exist_ok=True)
    ex = Example(command_for(args.lang, args.source_dir, args.work_dir))
    account = "%s-%d" % (args.lang, os.getpid())
    with tempfile.TemporaryDirectory() as config_dir:
        shutil.copy(os.path.join(args.source_dir, "examples", "config", "shop.yaml"), config_dir)
        with open(os.path.join(config_dir, "clients.yaml"), "w") as f:
            f.write(LEASE_DOMAIN)
        with LiveSluiced(args.sluiced, config_dir, admin_token=ADMIN_TOKEN) as s:
            base = "http://127.0.0.1:%d" % s.http
            try:
                checks(ex, base, account)
                lease(ex, s, base, account)
                s.stop_redis()
                out, _ = ex.check(base, "open", "route=sign_in", "account=" + account + "-b")
                expect("Redis stopped, fail open", out,
                       r"^allowed \(sluiced answered 503; this route fails open\)$")
                out, _ = ex.check(base, "closed", "route=sign_in", "account=" + account + "-b")
                expect("Redis stopped, fail closed", out,
                       r"^refused \(sluiced answered 503; this route fails closed\)$")
            except AssertionError:
                print("sluiced's log (tail):\n" + s.log(), file=sys.stderr)
                raise
            # Accepts (the kernel's backlog) and never answers: only the timeout ends it.
            with socket.socket() as silent:
                silent.bind(("127.0.0.1", 0))
                silent.listen(8)
                out, elapsed = ex.check("http://127.0.0.1:%d" % silent.getsockname()[1],
                                        "closed", "route=sign_in", "account=x", timeout_ms=250)
            expect("sluiced silent, fail closed", out,
                   r"^refused \(sluiced unreachable: .*; this route fails closed\)$")
            # Its own timeout ended the wait: without one the process is killed at 10 s
            # (and the test fails above); 5 s leaves room for a cold start on a loaded machine.
            assert elapsed < 5.0, "the example waited %.1f s for a silent sluiced" % elapsed
            assert s.stop_sluiced() == 0
            out, _ = ex.check(base, "open", "route=sign_in", "account=x")
            expect("sluiced stopped, fail open", out,
                   r"^allowed \(sluiced unreachable: .*; this route fails open\)$")
            out, _ = ex.check(base, "closed", "route=sign_in", "account=x")
            expect("sluiced stopped, fail closed", out,
                   r"^refused \(sluiced unreachable: .*; this route fails closed\)$")
    print("PASS")


if __name__ == "__main__":
    main()
