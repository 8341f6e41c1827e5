#!/usr/bin/env python3
"""Calling sluiced from Python, standard library only (urllib).

check(): one POST /v1/check before the work it guards.
  200       go on;
  429       refuse (or wait): Retry-After says how many seconds, RateLimit which limit and
            what is left;
  5xx, or sluiced not reachable within TIMEOUT_S (250 ms; SLUICED_TIMEOUT_MS):
            the route's own choice, as Envoy's failure_mode_deny: fail open (serve: the
            route is worth more than the limit) or fail closed (refuse: the limit
            protects something, e.g. sign-in).
  other 4xx a bug in the caller (unknown domain, malformed body): raised.
hold_lease(): a concurrency slot: acquire, heartbeat every lease_ttl / 3 on a thread,
  release in a `finally`.

    python3 sluiced_client.py check http://127.0.0.1:8080 shop --fail closed route=sign_in account=alice
    python3 sluiced_client.py lease http://127.0.0.1:8080 shop --hold-ms 2000 streams account=alice
"""
import argparse
import contextlib
import json
import os
import threading
import urllib.error
import urllib.request

# A limit check guards a request: it must not hold it long. sluiced answers in a
# millisecond or two; past this, the route's failure choice decides.
TIMEOUT_S = float(os.environ.get("SLUICED_TIMEOUT_MS", "250")) / 1000


def call(method, url, body=None):
    """(status, headers, parsed JSON body or None). HTTP errors are answers, not exceptions;
    a connection refused or a timeout raises OSError (urllib.error.URLError is one)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as r:
            status, headers, raw = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        status, headers, raw = e.code, e.headers, e.read()
    return status, headers, json.loads(raw) if raw else None


def check(base, domain, entries, fail_open):
    """Whether to serve the request, and why (a line to log)."""
    body = {"domain": domain, "descriptors": [{"entries": entries}]}
    try:
        status, headers, answer = call("POST", base + "/v1/check", body)
    except OSError as e:  # refused, reset, timed out
        return failure_choice("sluiced unreachable: %s" % e, fail_open)
    if status == 200:
        return True, "allowed (200) RateLimit: %s" % headers.get("RateLimit")
    if status == 429:
        return False, "refused (429): retry after %s s; RateLimit: %s; RateLimit-Policy: %s" % (
            headers.get("Retry-After"), headers.get("RateLimit"), headers.get("RateLimit-Policy"))
    if status >= 500:
        return failure_choice("sluiced answered %d" % status, fail_open)
    raise ValueError("sluiced refused the call (%d): %s" % (status, answer))


def failure_choice(why, fail_open):
    if fail_open:
        return True, "allowed (%s; this route fails open)" % why
    return False, "refused (%s; this route fails closed)" % why


@contextlib.contextmanager
def hold_lease(base, domain, entries, log=print):
    """Holds one slot of a concurrency limit for the `with` block; yields a threading.Event
    set if the lease is lost (not heartbeaten within lease_ttl): stop the work then.
    Raises RuntimeError when no slot is free (429) or sluiced cannot grant one."""
    status, headers, grant = call("POST", base + "/v1/leases", {"domain": domain,
                                                                "entries": entries})
    if status != 201:
        raise RuntimeError("lease refused (%d): retry after %s s" % (status,
                                                                      headers.get("Retry-After")))
    url = base + "/v1/leases/" + grant["lease"]
    interval_s = grant["lease_ttl_ms"] / 3000
    log("lease acquired (ttl %d ms, heartbeat every %d ms)" % (grant["lease_ttl_ms"],
                                                             interval_s * 1000))
    done, lost = threading.Event(), threading.Event()

    def heartbeat():
        while not done.wait(interval_s):
            try:
                status, _, answer = call("POST", url + "/heartbeat")
            except OSError as e:  # try again next time: one miss costs nothing
                log("heartbeat failed: %s" % e)
                continue
            if status == 200:
                log("heartbeat: held, expires in %d ms" % answer["expires_in_ms"])
            elif status in (404, 410):  # gone: its slot may be someone else's now
                log("lease lost (%d)" % status)
                lost.set()
                return

    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    try:
        yield lost
    finally:
        done.set()
        beat.join()
        try:
            status, _, _ = call("DELETE", url)
            log("lease released (%d)" % status)  # 204; 202: sluiced retries it for us
        except OSError as e:  # the slot frees lease_ttl after the last heartbeat
            log("release failed: %s" % e)


def parse_entries(args):
    return [{"key": a.split("=", 1)[0], "value": a.split("=", 1)[1]} if "=" in a
            else {"key": a} for a in args]


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check")
    c.add_argument("--fail", choices=["open", "closed"], required=True)
    lease = sub.add_parser("lease")
    lease.add_argument("--hold-ms", type=int, default=1000)
    for p in (c, lease):
        p.add_argument("base")
        p.add_argument("domain")
        p.add_argument("entries", nargs="+", help="key=value, or key alone")
    args = ap.parse_args()
    entries = parse_entries(args.entries)
    if args.command == "check":
        allowed, why = check(args.base, args.domain, entries, args.fail == "open")
        print(why)
        return
    try:
        with hold_lease(args.base, args.domain, entries) as lost:
            lost.wait(args.hold_ms / 1000)  # the work, stopped early if the lease is lost
    except RuntimeError as e:
        print(e)


if __name__ == "__main__":
    main()
