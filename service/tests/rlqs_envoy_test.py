#!/usr/bin/python3
"""sluiced's RLQS against simulated Envoys (envoy_sim.py: what Envoy's rate_limit_quota filter
does, from its source): one built sluiced on a private redis-server, on free loopback ports,
optionally with a latency proxy between them. One case per run:

  burst      a page touching 30 new buckets at once, Redis 25 ms away: 30 first reports in
             flight on one stream, every bucket answered, the stream not ended;
  wide       an Envoy holding 1,200 buckets: its periodic report gets an assignment for each;
  slow       grants below one request a second change (1 per 4 s to 1 per 67 s): the sum of
             the rates the Envoys enforce, with Envoy's comparison, stays at most the limit;
  domain     a report without a domain after the stream's first is answered; an empty
             report (an Envoy that holds no bucket) keeps its stream;
  absurd     10^9+1 and 10^13 requests in a second: answered by a share, no store error, no
             failure-policy answer;
  reset      a report in flight when its stream resets: the same Envoy's next stream gets
             shares, not DENY_ALL;
  slowstore  Redis 25 ms away (past the request path's 5 ms deadline): 20 subscriptions to a
             closed limit answered by shares, not by the policy;
  state      a client sending never-repeated bucket ids on one connection is refused
             RESOURCE_EXHAUSTED at the budget, and sluiced's RSS stays bounded (printed).

Usage: rlqs_envoy_test.py --sluiced PATH --source-dir DIR --case NAME. Exit 0 when every check
passed. Each case runs in a few seconds and stops every process it started (by pid)."""
import argparse
import math
import os
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import envoy_sim  # noqa: E402

DOMAIN = "envoy"
REPORT_INTERVAL_MS = 1000
CONFIG = f"""\
domain: {DOMAIN}
descriptors:
  - key: route
    value: users
    descriptors:
      - key: user
        algorithm: token_bucket
        failure_mode: closed
        rate_limit: {{name: per_user, unit: second, requests_per_unit: 10}}
  - key: route
    value: slow
    algorithm: token_bucket
    failure_mode: closed
    rate_limit: {{name: slow, unit: second, requests_per_unit: 10}}
  - key: route
    value: absurd
    algorithm: token_bucket
    failure_mode: open
    rate_limit: {{name: absurd, unit: second, requests_per_unit: 100}}
"""


def log(what):
    print("%s %s" % (time.strftime("%H:%M:%S"), what), flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_for(what, predicate, timeout_s):
    until = time.time() + timeout_s
    while time.time() < until:
        if predicate():
            return
        time.sleep(0.05)
    raise RuntimeError("timed out waiting for " + what)


class LatencyProxy:
    """A TCP proxy on loopback adding `delay_s` to every chunk, each way (order kept)."""

    def __init__(self, upstream_port, delay_s):
        self.upstream, self.delay = upstream_port, delay_s
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopped:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src, dst):
        import queue
        q = queue.Queue()

        def writer():
            while True:
                at, data = q.get()
                if data is None:
                    break
                wait = at + self.delay - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                try:
                    dst.sendall(data)
                except OSError:
                    break
        t = threading.Thread(target=writer, daemon=True)
        t.start()
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                q.put((0, None))
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            q.put((time.monotonic(), data))

    def stop(self):
        self.stopped = True
        self.listener.close()


class Setup:
    """redis-server, an optional latency proxy, and sluiced; each process stopped by its pid."""

    def __init__(self, binary, delay_s=0.0, extra=()):
        self.dir = tempfile.mkdtemp(prefix="rlqs-envoy-")
        self.procs = []
        rport = free_port()
        self._start("redis", ["redis-server", "--port", str(rport), "--bind", "127.0.0.1",
                              "--dir", self.dir, "--save", "", "--appendonly", "no"])
        wait_for("redis-server", lambda: self._connects(rport), 10)
        self.proxy = LatencyProxy(rport, delay_s) if delay_s > 0 else None
        store_port = self.proxy.port if self.proxy else rport
        config = os.path.join(self.dir, "config")
        os.mkdir(config)
        with open(os.path.join(config, "limits.yaml"), "w") as f:
            f.write(CONFIG)
        self.http, self.grpc, self.metrics_port = free_port(), free_port(), free_port()
        self.sluiced = self._start("sluiced", [
            binary, "--config", config, "--redis", "redis://127.0.0.1:%d" % store_port,
            "--http-listen", "127.0.0.1:%d" % self.http,
            "--grpc-listen", "127.0.0.1:%d" % self.grpc,
            "--admin-listen", "127.0.0.1:%d" % free_port(),
            "--metrics-listen", "127.0.0.1:%d" % self.metrics_port,
            "--rlqs-report-interval-ms", str(REPORT_INTERVAL_MS)] + list(extra))
        wait_for("sluiced", self._ready, 20)
        wait_for("sluiced's gRPC listener", lambda: self._connects(self.grpc), 10)
        self.channel = grpc.insecure_channel("127.0.0.1:%d" % self.grpc)

    def _start(self, name, argv):
        out = open(os.path.join(self.dir, name + ".log"), "ab")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=self.dir)
        out.close()
        self.procs.append(p)
        return p

    @staticmethod
    def _connects(port):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    def _get(self, port, path):
        import http.client
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read().decode()
        finally:
            c.close()

    def _ready(self):
        if self.sluiced.poll() is not None:
            raise RuntimeError("sluiced exited %s" % self.sluiced.returncode)
        try:
            return self._get(self.http, "/readyz")[0] == 200
        except OSError:
            return False

    def metric(self, name, label=""):
        """The sum of a metric's series (those whose labels contain `label`)."""
        _, page = self._get(self.metrics_port, "/metrics")
        total = 0.0
        for line in page.splitlines():
            if (line.startswith(name + "{") or line.startswith(name + " ")) and label in line:
                total += float(line.rsplit(" ", 1)[1])
        return total

    def rss_kib(self):
        with open("/proc/%d/status" % self.sluiced.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def log_tail(self, lines=30):
        with open(os.path.join(self.dir, "sluiced.log"), errors="replace") as f:
            return "".join(f.readlines()[-lines:])

    def stop(self):
        self.channel.close()
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if self.proxy:
            self.proxy.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Checks:
    def __init__(self):
        self.failed = []

    def expect(self, ok, what):
        log(("ok   " if ok else "FAIL ") + what)
        if not ok:
            self.failed.append(what)


def sim(setup, args, **kw):
    return envoy_sim.SimEnvoy(setup.channel, args.proto_dir, DOMAIN, **kw)


def user(n, route="users"):
    return {"route": route, "user": "u%d" % n}


def subscribe(envoy, ids, batch=5):
    """Creates the buckets a few at a time (first reports), each answered before the next few."""
    for i in range(0, len(ids), batch):
        before = envoy.answers()
        for b in ids[i:i + batch]:
            envoy.hit(b)
        keys = {envoy.key(b): before.get(envoy.key(b), 0) for b in ids[i:i + batch]}
        if not envoy.wait_answered(keys, 10):
            return False
    return True


def report_and_wait(envoy, timeout_s=10):
    before = envoy.answers()
    envoy.report()
    return envoy.wait_answered(before, timeout_s)


def is_token_bucket(strategy):
    return strategy is not None and strategy.HasField("token_bucket")


def case_burst(setup, args, c):
    e = sim(setup, args)
    ids = [user(i) for i in range(30)]
    for b in ids:  # 30 first reports, sent as fast as the stream takes them
        e.hit(b)
    answered = e.wait_answered({e.key(b): 0 for b in ids}, 10)
    c.expect(answered, "every one of 30 buckets created at once is answered")
    c.expect(all(is_token_bucket(e.strategy(b)) for b in ids),
             "each gets a token bucket assignment")
    c.expect(not e.closes, "the stream was not ended (closes: %s)" % e.closes)
    e.close()


def case_wide(setup, args, c):
    e = sim(setup, args)
    ids = [user(i) for i in range(1200)]
    c.expect(subscribe(e, ids, batch=8), "1,200 buckets subscribed")
    for b in ids:
        e.report_usage(b, 1, 0, 1)
    c.expect(report_and_wait(e, 20), "the periodic report of 1,200 buckets is answered")
    c.expect(all(is_token_bucket(e.strategy(b)) for b in ids),
             "every bucket of it has a token bucket assignment")
    c.expect(not e.closes, "the stream was not ended (closes: %s)" % e.closes)
    e.close()


def case_slow(setup, args, c):
    bucket = {"route": "slow"}
    light = [sim(setup, args) for _ in range(30)]
    heavy = sim(setup, args)

    def round_(envoys, demand):
        for e in envoys:
            e.report_usage(bucket, demand, 0, 1)
        return all([report_and_wait(e) for e in envoys])

    for e in light:
        e.hit(bucket)
        e.wait_answered({e.key(bucket): 0}, 10)
    for _ in range(3):  # 30 clients of 1/s on 10/s: 333 milli each, 1 per 4 s
        c.expect(round_(light, 1), "a round of the light clients answered")
    first = [envoy_sim.enforced_rate(e.strategy(bucket).token_bucket) for e in light
             if is_token_bucket(e.strategy(bucket))]
    c.expect(len(first) == 30 and all(0 < r < 1 for r in first),
             "30 light clients enforce grants below 1/s: %s" % sorted(set(first)))
    heavy.hit(bucket)
    heavy.wait_answered({heavy.key(bucket): 0}, 10)
    for _ in range(3):  # the heavy client at 600/s: the light ones' shares fall to ~1 per 67 s
        c.expect(round_([heavy], 600), "the heavy client's report answered")
        c.expect(round_(light, 1), "a round of the light clients answered")
    assigned = []
    for e in light + [heavy]:
        s = e.strategy(bucket)
        if is_token_bucket(s):
            assigned.append(envoy_sim.enforced_rate(s.token_bucket))
    enforced = [e.enforced(bucket) for e in light + [heavy]]
    c.expect(all(r < first[0] for r in assigned[:30]),
             "the light clients' assignments fell below the first ones: %s"
             % sorted(set(assigned[:30])))
    log("assigned sum %.3f/s, enforced sum %.3f/s (heavy %.3f/s), limit 10/s"
        % (sum(assigned), sum(enforced), enforced[-1]))
    c.expect(sum(enforced) <= 10.0,
             "the rates the Envoys enforce sum to at most the limit: %.3f/s" % sum(enforced))
    for e in light + [heavy]:
        e.close()


def case_domain(setup, args, c):
    e = sim(setup, args, domain_every_report=False)
    b = user(1)
    e.hit(b)
    c.expect(e.wait_answered({e.key(b): 0}, 10), "the first report (with its domain) answered")
    for _ in range(2):
        e.report_usage(b, 3, 0, 1)
        c.expect(report_and_wait(e), "a later report without a domain is answered")
    c.expect(is_token_bucket(e.strategy(b)), "with a token bucket")
    c.expect(not e.closes, "the stream was not ended (closes: %s)" % e.closes)
    e.close()
    # An Envoy that holds no bucket reports the domain alone, on a stream it opens for it.
    empty = sim(setup, args)
    c.expect(empty.report(), "an empty report is sent")
    time.sleep(0.3)
    c.expect(not empty.closes, "an empty report does not end the stream (closes: %s)"
             % empty.closes)
    empty.close()


def case_absurd(setup, args, c):
    e = sim(setup, args)
    b = {"route": "absurd"}
    e.hit(b)
    c.expect(e.wait_answered({e.key(b): 0}, 10), "subscribed")
    for count in (10**9, 10**9 + 1, 10**13, 2**64 - 1):
        e.report_usage(b, count, 0, 1)
        c.expect(report_and_wait(e), "a report of %d requests in 1 s is answered" % count)
        s = e.strategy(b)
        c.expect(is_token_bucket(s), "by a share (token bucket), not ALLOW_ALL: %s"
                 % (s.WhichOneof("strategy") if s else None))
    errors = setup.metric("sluiced_rlqs_store_errors_total")
    policy = setup.metric("sluiced_rlqs_answers_total", 'source="policy')
    store = setup.metric("sluiced_rlqs_answers_total", 'source="store"')
    c.expect(errors == 0, "no store error counted: %g" % errors)
    c.expect(policy == 0, "no failure-policy answer: %g" % policy)
    c.expect(store >= 5, "answered by the store: %g" % store)
    e.close()


class RawH2:
    """Hand-framed HTTP/2 (h2c, prior knowledge) for what a gRPC library will not do: write a
    report and a reset together, or never read (a window of 0)."""

    def __init__(self, port, window=65535):
        self.sock = socket.create_connection(("127.0.0.1", port))
        settings = b"" if window == 65535 else b"\x00\x04" + window.to_bytes(4, "big")
        self.sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + self.frame(4, 0, 0, settings))

    @staticmethod
    def frame(kind, flags, stream, payload):
        return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + \
            stream.to_bytes(4, "big") + payload

    @staticmethod
    def _string(b):
        n, out = len(b), bytearray()
        if n < 127:
            out.append(n)
        else:
            out.append(127)
            n -= 127
            while n >= 128:
                out.append(n % 128 + 128)
                n //= 128
            out.append(n)
        return bytes(out) + b

    def headers(self, stream):
        """HEADERS of a StreamRateLimitQuotas call (literals, never indexed, no Huffman)."""
        block = b"".join(b"\x10" + self._string(k) + self._string(v) for k, v in (
            (b":method", b"POST"), (b":scheme", b"http"), (b":path", envoy_sim.METHOD.encode()),
            (b":authority", b"localhost"), (b"content-type", b"application/grpc"),
            (b"te", b"trailers")))
        return self.frame(1, 4, stream, block)  # END_HEADERS

    def data(self, stream, message):
        return self.frame(0, 0, stream, b"\x00" + len(message).to_bytes(4, "big") + message)

    def rst(self, stream):
        return self.frame(3, 0, stream, (8).to_bytes(4, "big"))  # CANCEL

    def send(self, data):
        self.sock.sendall(data)

    def close(self):
        self.sock.close()


def case_reset(setup, args, c):
    pb, _ = envoy_sim.messages(args.proto_dir)
    for r in range(3):
        ids = [user(1000 * r + i) for i in range(50)]
        # A report of 100/s per bucket on a 10/s limit (each grant would be the whole limit),
        # and the stream's reset, in one write: the reset reaches sluiced while the report's
        # store calls are still on their way.
        report = pb.RateLimitQuotaUsageReports(domain=DOMAIN)
        for b in ids:
            u = report.bucket_quota_usages.add(num_requests_allowed=100)
            u.time_elapsed.seconds = 1
            for k, v in b.items():
                u.bucket_id.bucket[k] = v
        answered = setup.metric("sluiced_rlqs_answers_total")
        raw = RawH2(setup.grpc)
        raw.send(raw.headers(1) + raw.data(1, report.SerializeToString()) + raw.rst(1))
        # Every store call of the reset stream answered (then its give-back sent).
        wait_for("the reset stream's 50 answers",
                 lambda: setup.metric("sluiced_rlqs_answers_total") >= answered + 50, 10)
        time.sleep(0.2)
        raw.close()
        # The same Envoy on its next stream: its buckets subscribe again.
        e = sim(setup, args)
        c.expect(subscribe(e, ids), "round %d: the next stream's 50 subscriptions answered" % r)
        denied = [b for b in ids if not is_token_bucket(e.strategy(b))]
        c.expect(not denied, "round %d: every bucket gets a share on the next stream "
                 "(%d of 50 did not)" % (r, len(denied)))
        e.close()


def case_slowstore(setup, args, c):
    envoys = [sim(setup, args) for _ in range(20)]
    b = user(7)
    for e in envoys:
        e.hit(b)
    until = time.monotonic() + 15
    answered = sum(e.wait_answered({e.key(b): 0}, max(0.1, until - time.monotonic()))
                   for e in envoys)
    c.expect(answered == 20, "20 subscriptions answered: %d" % answered)
    strategies = [e.strategy(b) for e in envoys]
    shares = sum(is_token_bucket(s) for s in strategies)
    denied = sum(s is not None and s.HasField("blanket_rule") for s in strategies)
    policy = setup.metric("sluiced_rlqs_answers_total", 'source="policy')
    store = setup.metric("sluiced_rlqs_answers_total", 'source="store"')
    log("20 subscriptions through 25 ms of latency: %d token buckets, %d blanket rules "
        "(grants of 0: the limit is taken); "
        "answers: %g by the store, %g by the policy" % (shares, denied, store, policy))
    c.expect(policy == 0, "no subscription answered by the failure policy: %g" % policy)
    c.expect(store == 20, "all 20 answered by the store: %g" % store)
    for e in envoys:
        e.close()


def case_state(setup, args, c):
    """Raw reports (not an Envoy): every report 400 new buckets of 4 entries x 500 bytes,
    on 4 streams of one connection: at most 4 x 10,000 buckets (80 MiB of ids) before."""
    pb, _ = envoy_sim.messages(args.proto_dir)
    rss0 = setup.rss_kib()
    codes, sent = [], [0]
    lock = threading.Lock()

    def stream(n):
        def reports():
            for r in range(25):
                rep = pb.RateLimitQuotaUsageReports(domain=DOMAIN)
                for i in range(400):
                    u = rep.bucket_quota_usages.add(num_requests_allowed=1)
                    for k in range(4):
                        u.bucket_id.bucket["k%d" % k] = "%d-%d-%d-%d-" % (n, r, i, k) + "x" * 500
                with lock:
                    sent[0] += 1
                yield rep
        call = setup.channel.stream_stream(
            envoy_sim.METHOD, request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb.RateLimitQuotaResponse.FromString)(reports(), timeout=60)
        try:
            for _ in call:
                pass
            code = (grpc.StatusCode.OK, "")
        except grpc.RpcError as e:
            code = (e.code(), e.details())
        with lock:
            codes.append(code)

    threads = [threading.Thread(target=stream, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    rss1 = setup.rss_kib()
    log("4 streams on one connection, %d reports of 400 new 2 KiB bucket ids sent: "
        "ends %s; sluiced RSS %d KiB -> %d KiB (+%d KiB)"
        % (sent[0], codes, rss0, rss1, rss1 - rss0))
    c.expect(any(code == grpc.StatusCode.RESOURCE_EXHAUSTED and "state budget" in details
                 for code, details in codes),
             "a stream over the state budget is refused RESOURCE_EXHAUSTED")
    if args.sanitized:
        # AddressSanitizer keeps freed memory in quarantine (256 MiB): RSS says nothing there.
        log("RSS not checked: sluiced is built with a sanitizer")
    else:
        c.expect(rss1 - rss0 < 48 * 1024, "RSS grew by less than 48 MiB: %d KiB" % (rss1 - rss0))


CASES = {"burst": (case_burst, 0.025, ("--deadline-ms", "1000")), "wide": (case_wide, 0.0, ()),
         "slow": (case_slow, 0.0, ()), "domain": (case_domain, 0.0, ()),
         "absurd": (case_absurd, 0.0, ()),
         "reset": (case_reset, 0.025, ("--deadline-ms", "1000")),
         "slowstore": (case_slowstore, 0.025, ()),
         "state": (case_state, 0.0, ("--rlqs-unmatched", "allow_all"))}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sluiced", required=True)
    p.add_argument("--source-dir", required=True)
    p.add_argument("--case", required=True, choices=sorted(CASES))
    p.add_argument("--sanitized", action="store_true",
                   help="sluiced is built with a sanitizer: memory figures are not checked")
    args = p.parse_args()
    args.sluiced = os.path.abspath(args.sluiced)
    args.proto_dir = os.path.join(os.path.abspath(args.source_dir), "service", "proto")
    fn, delay, extra = CASES[args.case]
    setup = Setup(args.sluiced, delay, extra)
    c = Checks()
    try:
        fn(setup, args, c)
    except Exception:
        traceback.print_exc()
        c.failed.append("exception")
    finally:
        if c.failed:
            log("sluiced's log, last lines:\n" + setup.log_tail())
        setup.stop()
    if c.failed:
        log("%d check(s) failed" % len(c.failed))
        return 1
    log("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
