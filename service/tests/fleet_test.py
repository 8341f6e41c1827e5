#!/usr/bin/python3
"""The fleet test: three sluiced behind HAProxy (examples/haproxy.cfg, as docs/operating.md
shows it), each restarted in turn, twice, while a mixed load runs through HAProxy only:
HTTP checks, Envoy RLS calls, leases (acquired, heartbeated every lease_ttl / 3, released)
and RLQS streams. Every process runs on free loopback ports and is stopped by its pid.

What must hold throughout (docs/operating.md, Behind a load balancer):
- no call fails: HAProxy's retries (conn-failure, empty-response) cover an instance that
  stops; an RLQS stream may end at a roll (UNAVAILABLE from sluiced's drain, or reset
  by HAProxy: CANCELLED) and reconnects;
- no live lease is reported lost (410) or unknown (404), wherever it was granted;
- the live leases of an id in Redis never exceed the cap, nor the leases callers hold;
- the checks admitted per fixed window never exceed the limit;
- a quota bucket's live grants in Redis never sum above its rate, nor the assignments
  the RLQS clients keep in force (as Envoy keeps them: until their TTL or the next);
- at the end, no key is without an expiry;
- once the load has stopped, a caller that leaves while its acquire waits (wait_ms) gets no
  slot: HAProxy (option abortonclose) closes sluiced's connection too, and the slot that
  frees goes to the next caller within 2 s (lease_ttl is 3 s).
And that the mechanisms were exercised: each roll replaced the process (a new pid served
calls), HAProxy spread every kind of call over the three instances, leases were
heartbeated through an instance other than the one that granted them and outlived the
restart of that instance, callers were refused at the cap, windows were filled.

Usage: fleet_test.py --sluiced PATH --source-dir DIR [--store standalone|cluster]
[--rounds N] [--pause-s S] [--tail-s S]. SLUICE_FLEET_LONG=1 runs 5 rounds, 3 s apart,
and a 20 s tail; SLUICE_FLEET_SEED fixes the lease holders' random hold times (printed).
Exit 0 when every check passed."""
import argparse
import collections
import http.client
import json
import os
import queue
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rlqs_client  # noqa: E402 (RLQS messages by Envoy's field numbers)
import rls_client  # noqa: E402 (stubs generated from service/proto)

DOMAIN = "fleet"
CHECK_LIMIT = 10            # per account per second, fixed window (aligned to the second)
CHECK_ACCOUNTS = ["a1", "a2", "a3"]
LEASE_CAP = 3               # concurrent leases per account
LEASE_TTL_S = 3
LEASE_ACCOUNTS = ["s1", "s2", "s3"]
LEASE_HOLDERS_PER_ACCOUNT = 5  # more than the cap: some are refused
QUOTA_RATE = 100            # per second, shared by the RLQS clients
QUOTA_BUCKET = {"route": "quota"}
RLQS_CLIENTS = 4
RLQS_DEMAND = 60            # requests per second each client reports (4 x 60 > 100)
REPORT_INTERVAL_S = 1
DENY_ALL = 1                # RateLimitStrategy.BlanketRule
INSTANCES = 3

CONFIG = f"""\
domain: {DOMAIN}
descriptors:
  - key: route
    value: check
    descriptors:
      - key: account
        failure_mode: closed
        rate_limit: {{name: per_account, unit: second, requests_per_unit: {CHECK_LIMIT}}}
  - key: streams
    descriptors:
      - key: account
        algorithm: concurrency
        lease_ttl: {LEASE_TTL_S}s
        failure_mode: closed
        rate_limit: {{name: streams, requests_per_unit: {LEASE_CAP}}}
  - key: route
    value: quota
    algorithm: token_bucket
    failure_mode: closed
    rate_limit: {{name: quota, unit: second, requests_per_unit: {QUOTA_RATE}}}
"""


class Findings:
    """What went wrong, by kind (each counted, its first 5 kept), and the figures to print."""

    def __init__(self):
        self.lock = threading.Lock()
        self.failures = collections.defaultdict(list)  # kind -> first details
        self.failure_counts = collections.Counter()
        self.counts = collections.Counter()

    @property
    def failure_count(self):
        return sum(self.failure_counts.values())

    def fail(self, kind, detail):
        with self.lock:
            self.failure_counts[kind] += 1
            if len(self.failures[kind]) < 5:
                self.failures[kind].append("%s %s" % (time.strftime("%H:%M:%S"), detail))

    def count(self, what, n=1):
        with self.lock:
            self.counts[what] += n

    def peak(self, what, n):
        with self.lock:
            self.counts[what] = max(self.counts[what], n)


F = Findings()


def log(what):
    print("%s %s" % (time.strftime("%H:%M:%S"), what), flush=True)


# --- processes and ports ---------------------------------------------------------------

class Processes:
    """Every process the test starts, each stopped by its own pid at the end."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.started = []

    def start(self, name, argv, env=None):
        out = open(os.path.join(self.workdir, name + ".log"), "ab")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                             cwd=self.workdir)
        out.close()
        self.started.append(p)
        return p

    def stop_all(self):
        for p in self.started:
            if p.poll() is None:
                p.kill()
                p.wait()


def free_ports(n, with_bus=False):
    """n distinct free loopback ports (and port + 10000 free too, for a cluster's bus)."""
    held, ports = [], []
    while len(ports) < n:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        held.append(s)
        if with_bus:
            if port + 10000 > 65535:
                continue
            bus = socket.socket()
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                bus.close()
                continue
            held.append(bus)
        ports.append(port)
    for s in held:
        s.close()
    return ports


def wait_for(what, predicate, timeout_s, interval_s=0.05):
    until = time.time() + timeout_s
    while time.time() < until:
        if predicate():
            return True
        time.sleep(interval_s)
    raise RuntimeError("timed out after %.1f s waiting for %s" % (timeout_s, what))


# --- Redis -----------------------------------------------------------------------------

class RespError(Exception):
    pass


class Resp:
    """A minimal RESP2 client: one connection, one command at a time."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.reader = self.sock.makefile("rb")

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self._read()

    def _read(self):
        line = self.reader.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RespError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.reader.read(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise RespError("unexpected reply %r" % line)

    def close(self):
        self.sock.close()


def redis_now_ms(conn):
    sec, usec = conn.call("TIME")
    return int(sec) * 1000 + int(usec) // 1000


def scan_keys(conn, pattern="*"):
    cursor, keys = b"0", []
    while True:
        cursor, batch = conn.call("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
        keys += batch
        if cursor == b"0":
            return keys


class Store:
    """One redis-server, or a Redis Cluster of three primaries, on free loopback ports."""

    def __init__(self, procs, kind):
        self.procs, self.kind = procs, kind
        self.ports = free_ports(1 if kind == "standalone" else 3, with_bus=kind == "cluster")
        for i, port in enumerate(self.ports):
            d = os.path.join(procs.workdir, "redis-%d" % port)
            os.mkdir(d)
            argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
                    "--save", "", "--appendonly", "no"]
            if kind == "cluster":
                argv += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                         "--cluster-node-timeout", "2000"]
            procs.start("redis-%d" % i, argv)
        for port in self.ports:
            wait_for("redis-server on %d" % port, lambda: self._pings(port), 10)
        if kind == "cluster":
            create = subprocess.run(
                ["redis-cli", "--cluster", "create"] + ["127.0.0.1:%d" % p for p in self.ports] +
                ["--cluster-replicas", "0", "--cluster-yes"], capture_output=True, timeout=60)
            if create.returncode != 0:
                raise RuntimeError("redis-cli --cluster create: %s" % create.stdout.decode())
            wait_for("cluster_state:ok on every node", self._cluster_ok, 30, 0.2)
        scheme = "redis" if kind == "standalone" else "redis+cluster"
        self.url = "%s://127.0.0.1:%d" % (scheme, self.ports[0])

    @staticmethod
    def _pings(port):
        try:
            c = Resp(port)
            ok = c.call("PING") == b"PONG"
            c.close()
            return ok
        except OSError:
            return False

    def _cluster_ok(self):
        for port in self.ports:
            c = Resp(port)
            info = c.call("CLUSTER", "INFO")
            c.close()
            if b"cluster_state:ok" not in info:
                return False
        return True

    def primaries(self):
        """A connection to each node holding keys (every node: no replicas)."""
        return [Resp(p) for p in self.ports]


# --- sluiced and HAProxy ---------------------------------------------------------------

class Sluiced:
    """One instance: the same four ports across its restarts."""

    def __init__(self, n, procs, binary, config_dir, redis_url):
        self.n, self.name = n, "sluiced-%d" % n
        self.procs, self.binary, self.config_dir, self.redis_url = (procs, binary, config_dir,
                                                                    redis_url)
        self.http, self.grpc, self.admin, self.metrics = free_ports(4)
        self.process = None

    def start(self):
        argv = [self.binary, "--config", self.config_dir, "--redis", self.redis_url,
                "--http-listen", "127.0.0.1:%d" % self.http,
                "--grpc-listen", "127.0.0.1:%d" % self.grpc,
                "--admin-listen", "127.0.0.1:%d" % self.admin,
                "--metrics-listen", "127.0.0.1:%d" % self.metrics,
                "--default-failure-mode", "closed",
                # Generous for a shared test machine (a load average of 10 on two cores
                # made Redis answer a call in over 200 ms): a deadline missed for want of
                # CPU is answered by policy (503), which is not what this test is about.
                "--deadline-ms", "1000",
                "--rlqs-report-interval-ms", str(REPORT_INTERVAL_S * 1000),
                "--drain-timeout-ms", "5000",
                "--audit-log", os.path.join(self.procs.workdir, self.name + "-audit.log")]
        self.process = self.procs.start(self.name, argv)
        return self.process.pid

    def get(self, port, path):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read().decode()
        finally:
            c.close()

    def ready(self):
        if self.process.poll() is not None:
            raise RuntimeError("%s exited %s at start" % (self.name, self.process.returncode))
        try:
            status, body = self.get(self.http, "/readyz")
            return status == 200 and '"ready"' in body
        except OSError:
            return False

    def metric(self, name):
        """The sum of every series of one metric on this process's metrics listener."""
        _, page = self.get(self.metrics, "/metrics")
        total = 0.0
        for line in page.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self):
        """SIGTERM, and the time it took to drain and exit (it must exit 0)."""
        t0 = time.time()
        self.process.send_signal(signal.SIGTERM)
        try:
            rc = self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            rc = "killed after 15 s"
        if rc != 0:
            F.fail("sluiced did not exit 0 on SIGTERM",
                   "%s (pid %d) exited %s" % (self.name, self.process.pid, rc))
        return time.time() - t0


class Haproxy:
    """HAProxy on examples/haproxy.cfg, its addresses replaced by the test's ports."""

    def __init__(self, procs, template, instances):
        self.procs = procs
        self.http, self.grpc = free_ports(2)
        self.socket_path = os.path.join(procs.workdir, "haproxy.sock")
        text = open(template).read()
        # docs/operating.md shows this very file.
        docs = os.path.join(os.path.dirname(os.path.dirname(template)), "docs", "operating.md")
        if not re.search("```[a-z]*\n" + re.escape(text) + "```\n", open(docs).read()):
            raise RuntimeError("docs/operating.md does not show %s as it is" % template)
        swaps = {"bind :8080": "bind 127.0.0.1:%d" % self.http,
                 "bind :8081 ": "bind 127.0.0.1:%d " % self.grpc,
                 "/run/haproxy/sluiced.sock": self.socket_path}
        for s in instances:
            swaps[" %s:8080 " % s.name] = " 127.0.0.1:%d " % s.http
            swaps[" %s:8081 " % s.name] = " 127.0.0.1:%d " % s.grpc
        for old, new in swaps.items():
            if text.count(old) != 1:
                raise RuntimeError("%s: expected '%s' once" % (template, old))
            text = text.replace(old, new)
        self.config = os.path.join(procs.workdir, "haproxy.cfg")
        with open(self.config, "w") as f:
            f.write(text)
        check = subprocess.run(["haproxy", "-c", "-f", self.config], capture_output=True)
        if check.returncode != 0:
            raise RuntimeError("haproxy -c: %s" % (check.stdout + check.stderr).decode())
        self.process = procs.start("haproxy", ["haproxy", "-db", "-f", self.config])
        wait_for("HAProxy's stats socket", lambda: os.path.exists(self.socket_path), 10)

    def stats(self):
        """`show stat`: {(proxy, server): row}."""
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(self.socket_path)
        s.sendall(b"show stat\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        lines = data.decode().splitlines()
        header = lines[0].lstrip("# ").split(",")
        rows = {}
        for line in lines[1:]:
            if line:
                row = dict(zip(header, line.split(",")))
                rows[(row["pxname"], row["svname"])] = row
        return rows

    def up(self, server):
        rows = self.stats()
        return all(rows[(b, server)]["status"] == "UP" for b in ("sluiced_http", "sluiced_grpc"))


# --- the load --------------------------------------------------------------------------

class Http:
    """A keep-alive HTTP/1.1 connection to HAProxy."""

    def __init__(self, port):
        self.port = port
        self.conn = None

    def call(self, method, path, body=None):
        """(status, headers, body), or raises OSError / HTTPException."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            self.conn.request(method, path, body=body, headers=headers)
            r = self.conn.getresponse()
            return r.status, r.headers, r.read()
        except Exception:
            self.conn.close()
            self.conn = None
            raise


class Windows:
    """Admitted checks per (account, fixed window), from both protocols. A decision's
    window is the second its reset ends: the decision was made between sending and
    receiving, so its end is within half that time of (midpoint + reset_after)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.admitted = collections.Counter()

    def add(self, account, t_send, t_recv, reset_after_ms):
        if t_recv - t_send > 0.45:
            F.count("checks admitted whose window is ambiguous (slower than 450 ms)")
            return
        end = round(((t_send + t_recv) / 2 * 1000 + reset_after_ms) / 1000)
        with self.lock:
            self.admitted[(account, end - 1)] += 1


WINDOWS = Windows()


def served_by(headers):
    return headers.get("X-Sluiced-Instance", "?") if headers else "?"


def http_checks(port, worker, stop):
    client = Http(port)
    i = worker
    while not stop.is_set():
        account = CHECK_ACCOUNTS[i % len(CHECK_ACCOUNTS)]
        i += 1
        body = json.dumps({"domain": DOMAIN, "descriptors": [{"entries": [
            {"key": "route", "value": "check"}, {"key": "account", "value": account}]}]})
        t0 = time.time()
        try:
            status, headers, data = client.call("POST", "/v1/check", body)
        except Exception as e:  # noqa: BLE001 (any transport error is a finding)
            F.fail("HTTP checks failed", repr(e))
            continue
        t1 = time.time()
        F.count("http checks via " + served_by(headers))
        if status == 200:
            d = json.loads(data)["descriptors"][0]
            if d.get("source") != "store":
                F.fail("HTTP checks not decided by the store", data)
            WINDOWS.add(account, t0, t1, d["reset_after_ms"])
            F.count("http checks admitted")
        elif status == 429:
            F.count("http checks refused")
        else:
            F.fail("HTTP checks failed", "%d %s" % (status, data[:200]))
        time.sleep(0.02)


def rls_checks(port, worker, stop):
    from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
    from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
    channel = grpc.insecure_channel("127.0.0.1:%d" % port)
    stub = rls_pb2_grpc.RateLimitServiceStub(channel)
    i = worker
    while not stop.is_set():
        account = CHECK_ACCOUNTS[i % len(CHECK_ACCOUNTS)]
        i += 1
        d = ratelimit_pb2.RateLimitDescriptor(entries=[
            ratelimit_pb2.RateLimitDescriptor.Entry(key=b"route", value=b"check"),
            ratelimit_pb2.RateLimitDescriptor.Entry(key=b"account", value=account.encode())])
        t0 = time.time()
        try:
            r, call = stub.ShouldRateLimit.with_call(
                rls_pb2.RateLimitRequest(domain=DOMAIN, descriptors=[d]), timeout=10)
        except grpc.RpcError as e:
            F.fail("RLS checks failed", "%s %s" % (e.code(), e.details()))
            continue
        t1 = time.time()
        F.count("rls checks via " + dict(call.initial_metadata()).get("x-sluiced-instance", "?"))
        if r.overall_code == rls_pb2.RateLimitResponse.OK:
            reset = r.statuses[0].duration_until_reset
            WINDOWS.add(account, t0, t1, reset.seconds * 1000 + reset.nanos // 1000000)
            F.count("rls checks admitted")
        elif r.overall_code == rls_pb2.RateLimitResponse.OVER_LIMIT:
            F.count("rls checks refused")
        else:
            F.fail("RLS checks failed", str(r))
        time.sleep(0.02)
    channel.close()


class Rolls:
    """When each instance was stopped: which leases outlived the restart of their granter,
    whether a stream ended because of a roll."""

    def __init__(self):
        self.lock = threading.Lock()
        self.stops = []  # [instance name, time of SIGTERM, time of exit or None]

    def stopping(self, name):
        with self.lock:
            self.stops.append([name, time.time(), None])

    def stopped(self):
        with self.lock:
            self.stops[-1][2] = time.time()

    def restarted_between(self, name, t0, t1):
        with self.lock:
            return any(n == name and t0 < at < t1 for n, at, _ in self.stops)

    def stopping_near(self, t):
        """Whether t falls between a SIGTERM and 3 s after that process exited (a client
        notices a stream's end at its next report, a second later)."""
        with self.lock:
            return any(at - 0.5 <= t and (end is None or t <= end + 3) for _, at, end in self.stops)


ROLLS = Rolls()


class Holders:
    """The leases callers hold per account (from the grant's arrival to the release's
    sending: inside the time the lease lives in Redis), never above the cap."""

    def __init__(self):
        self.lock = threading.Lock()
        self.held = collections.Counter()
        self.max_held = 0

    def take(self, account):
        with self.lock:
            self.held[account] += 1
            self.max_held = max(self.max_held, self.held[account])
            if self.held[account] > LEASE_CAP:
                F.fail("leases held above the cap",
                       "%d leases of %s at once" % (self.held[account], account))

    def give(self, account):
        with self.lock:
            self.held[account] -= 1


HOLDERS = Holders()


def lease_holder(port, account, rng, stop):
    client = Http(port)
    body = json.dumps({"domain": DOMAIN, "entries": [{"key": "streams"},
                                                     {"key": "account", "value": account}]})
    while not stop.is_set():
        try:
            status, headers, data = client.call("POST", "/v1/leases", body)
        except Exception as e:  # noqa: BLE001
            F.fail("lease acquires failed", repr(e))
            continue
        if status == 429:
            F.count("lease acquires refused at the cap")
            time.sleep(rng.uniform(0.05, 0.3))
            continue
        if status != 201:
            F.fail("lease acquires failed", "%d %s" % (status, data[:200]))
            time.sleep(0.1)
            continue
        handle = json.loads(data)["lease"]
        if headers.get("Location") != "/v1/leases/" + handle:
            F.fail("lease acquires failed",
                   "Location %s for %s" % (headers.get("Location"), handle))
        granter, granted_at = served_by(headers), time.time()
        F.count("leases granted")
        HOLDERS.take(account)
        hold_until = granted_at + rng.uniform(1.0, 4.0 * LEASE_TTL_S)
        lost = False
        while time.time() < hold_until and not stop.is_set() and not lost:
            time.sleep(min(LEASE_TTL_S / 3.0, max(0.0, hold_until - time.time())))
            try:
                status, headers, data = client.call("POST", "/v1/leases/%s/heartbeat" % handle)
            except Exception as e:  # noqa: BLE001
                F.fail("lease heartbeats failed", repr(e))
                continue
            if status == 200:
                F.count("heartbeats")
                if served_by(headers) != granter:
                    F.count("heartbeats through another instance than the granter")
            else:
                lost = True
                F.fail("live leases lost or unknown", "granted by %s %.1f s earlier: %d %s" %
                       (granter, time.time() - granted_at, status, data[:200]))
        HOLDERS.give(account)
        try:
            status, headers, data = client.call("DELETE", "/v1/leases/%s" % handle)
        except Exception as e:  # noqa: BLE001
            F.fail("lease releases failed", repr(e))
            continue
        if status != 204 and not lost:
            F.fail("lease releases failed", "granted by %s %.1f s earlier: %d %s" %
                   (granter, time.time() - granted_at, status, data[:200]))
        elif status == 204 and ROLLS.restarted_between(granter, granted_at, time.time()):
            F.count("leases that outlived the restart of the instance that granted them")


class Assignments:
    """Each RLQS client's assignment in force, as Envoy keeps it: until its TTL passes or
    another replaces it (a stream that ends leaves it in force). Their sum must stay within
    the rate; a grant that shrank reaches its client only after the store made it, so the
    sum may pass the rate for the answer's transit (milliseconds): only a sum above it in
    two samples in a row (100 ms apart) fails."""

    def __init__(self):
        self.lock = threading.Lock()
        self.in_force = {}  # client -> (rate, until)
        self.max_sum = 0.0
        self.over_since = None

    def set(self, client, rate, ttl_s):
        with self.lock:
            self.in_force[client] = (rate, time.time() + ttl_s)

    def sample(self):
        now = time.time()
        with self.lock:
            total = sum(r for r, until in self.in_force.values() if until > now)
            self.max_sum = max(self.max_sum, total)
            if total <= QUOTA_RATE + 1e-9:  # a float sum of shares that are exactly R
                self.over_since = None
            elif self.over_since is None:
                self.over_since = now
            elif self.over_since > 0:
                F.fail("RLQS clients enforcing above the rate",
                       "%.1f/s together for %.2f s" % (total, now - self.over_since))
                self.over_since = -1  # once per excursion


ASSIGNMENTS = Assignments()


def rlqs_client_loop(port, n, stop):
    """One Envoy's RLQS client: a stream, a subscription report (one request), then a
    report every interval of the demand it saw (allowed up to its grant). When a stream
    ends it opens another at its next report, as Envoy's filter does; its assignment stays
    in force meanwhile."""
    channel = grpc.insecure_channel("127.0.0.1:%d" % port)
    method = channel.stream_stream(rlqs_client.METHOD, request_serializer=lambda b: b,
                                   response_deserializer=rlqs_client.Response.FromString)
    rate = 0.0
    elapsed = 0  # the first report subscribes
    ended_at = None  # when a roll ended the stream, until a share > 0 comes again
    while not stop.is_set():
        out = queue.Queue()
        call = method(iter(out.get, None))
        try:
            while not stop.is_set():
                allowed = 1 if elapsed == 0 else int(min(RLQS_DEMAND, rate) * elapsed)
                denied = 0 if elapsed == 0 else RLQS_DEMAND * elapsed - allowed
                r = rlqs_client.Reports(domain=DOMAIN)
                u = r.bucket_quota_usages.add(num_requests_allowed=allowed,
                                              num_requests_denied=denied)
                u.time_elapsed.seconds = elapsed
                for k, v in QUOTA_BUCKET.items():
                    u.bucket_id.bucket[k] = v
                out.put(r.SerializeToString())
                answer = next(call)
                F.count("rlqs answers via " +
                        dict(call.initial_metadata()).get("x-sluiced-instance", "?"))
                action = answer.bucket_action[0]
                strategy = action.quota_assignment_action.rate_limit_strategy
                if strategy.HasField("token_bucket"):
                    rate = rlqs_client.rate(action)
                    F.count("rlqs token buckets assigned")
                    if ended_at is not None:
                        F.peak("longest an RLQS client moved by a roll waited for a share "
                               "> 0, ms", int((time.time() - ended_at) * 1000))
                        ended_at = None
                elif strategy.HasField("blanket_rule") and strategy.blanket_rule == DENY_ALL:
                    rate = 0.0  # a share of 0: the others hold the whole rate
                    F.count("rlqs DENY_ALL assigned (a share of 0)")
                else:
                    F.fail("RLQS answers neither a token bucket nor DENY_ALL",
                           "client %d: %s" % (n, action))
                ttl = action.quota_assignment_action.assignment_time_to_live.seconds
                ASSIGNMENTS.set(n, rate, ttl)
                elapsed = REPORT_INTERVAL_S
                stop.wait(REPORT_INTERVAL_S)
        except grpc.RpcError as e:
            # sluiced ends its streams UNAVAILABLE when it drains; through HAProxy 2.6 the
            # client may see the stream reset (CANCELLED) instead. Either only at a roll.
            if (e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED) and
                    ROLLS.stopping_near(time.time())):
                F.count("rlqs streams ended by a roll and reopened")
                F.count("rlqs streams ended %s" % e.code().name)
                F.count("rlqs client %d reconnects" % n)
                ended_at = ended_at or time.time()
            else:
                F.fail("RLQS streams ended otherwise than by a roll",
                       "client %d: %s %s" % (n, e.code(), e.details()))
            stop.wait(REPORT_INTERVAL_S)
        finally:
            out.put(None)
            call.cancel()
    if ended_at is not None:
        RLQS_WAITING.add(n)
    channel.close()


RLQS_WAITING = set()  # clients a roll moved that had no share > 0 again when the load stopped


def monitor(store, stop):
    """Redis as it is, every 100 ms: the live leases of every lease set, the live grants
    of every quota bucket."""
    conns = store.primaries()
    max_live = 0
    max_grants = 0.0
    while not stop.is_set():
        ASSIGNMENTS.sample()
        for c in conns:
            now = redis_now_ms(c)
            for key in scan_keys(c, "*:cc"):
                live = c.call("ZCOUNT", key, "(%d" % now, "+inf")
                max_live = max(max_live, live)
                if live > LEASE_CAP:
                    F.fail("live leases in Redis above the cap", "%d in %s" % (live, key.decode()))
            for key in scan_keys(c, "*:qs"):
                fields = c.call("HGETALL", key) or []
                grants_milli = 0  # summed in integers: 33333 + 66667 is 100.000, exactly
                for field, value in zip(fields[0::2], fields[1::2]):
                    if field == b"":  # the bucket's running sums, not a client
                        continue
                    expires, _, grant = value.decode().split()
                    if int(expires) > now:
                        grants_milli += int(grant)
                grants = grants_milli / 1000.0
                max_grants = max(max_grants, grants)
                if grants_milli > QUOTA_RATE * 1000:
                    F.fail("live grants in Redis above the rate",
                           "%.3f/s in %s" % (grants, key.decode()))
        F.count("samples of Redis")
        stop.wait(0.1)
    for c in conns:
        c.close()
    F.count("most live leases of one id seen in Redis", max_live)
    F.count("highest sum of a bucket's live grants seen in Redis, per second", int(max_grants))


# --- the run ---------------------------------------------------------------------------

def roll(instances, haproxy, rounds, pause_s):
    drains = []
    for r in range(rounds):
        for s in instances:
            old_pid = s.process.pid
            ROLLS.stopping(s.name)
            drains.append(s.stop())
            ROLLS.stopped()
            new_pid = s.start()
            wait_for(s.name + " ready", s.ready, 15)
            wait_for("HAProxy to put %s back" % s.name, lambda: haproxy.up(s.name), 15)
            # The replacement served calls that came through HAProxy.
            wait_for("%s (pid %d) to serve checks and gRPC calls" % (s.name, new_pid),
                     lambda: s.metric("sluiced_decisions_total") > 0 and
                     s.metric("sluiced_grpc_requests_total") > 0, 15)
            log("round %d: %s pid %d -> %d, drained in %.2f s" % (r + 1, s.name, old_pid,
                                                                    new_pid, drains[-1]))
            F.count("rolls")
            time.sleep(pause_s)
    return drains


def waiter_that_leaves(store, instances, port):
    """A caller whose own timeout is shorter than its wait_ms leaves while it waits. HAProxy
    (option abortonclose) closes its connection to sluiced too, so the slot that frees goes
    to the next caller within a second, not to the caller that left (whose lease nobody would
    heartbeat: it would hold the slot for lease_ttl)."""
    client = Http(port)

    def body(wait_ms=0):
        b = {"domain": DOMAIN, "entries": [{"key": "streams"}, {"key": "account", "value": "leaver"}]}
        if wait_ms:
            b["wait_ms"] = wait_ms
        return json.dumps(b)

    handles = []
    for _ in range(LEASE_CAP):
        status, _, data = client.call("POST", "/v1/leases", body())
        if status != 201:
            F.fail("a waiter that left", "filling the cap: %d %s" % (status, data[:200]))
            return
        handles.append(json.loads(data)["lease"])
    abandoned = sum(s.metric("sluiced_lease_waits_abandoned_total") for s in instances)
    payload = body(10000).encode()
    leaving = socket.create_connection(("127.0.0.1", port))
    leaving.sendall(b"POST /v1/leases HTTP/1.1\r\nHost: fleet\r\nContent-Type: application/json"
                    b"\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload)

    def tickets():
        n = 0
        for c in store.primaries():
            n += sum(c.call("ZCARD", k) for k in scan_keys(c, "*ccw"))  # no other waits
            c.close()
        return n
    wait_for("the leaving waiter's ticket in Redis", lambda: tickets() == 1, 10)
    leaving.close()
    time.sleep(0.3)
    status, _, data = client.call("DELETE", "/v1/leases/" + handles.pop())
    if status != 204:
        F.fail("a waiter that left", "release: %d %s" % (status, data[:200]))
    released = time.time()
    granted = None
    while granted is None and time.time() - released < 2.0:  # lease_ttl is 3 s
        status, _, data = client.call("POST", "/v1/leases", body())
        if status == 201:
            granted = json.loads(data)["lease"]
            handles.append(granted)
        else:
            time.sleep(0.1)
    if granted is None:
        F.fail("a slot went to a caller that had left",
               "2 s after a release, the next acquire still got %d %s" % (status, data[:200]))
    if sum(s.metric("sluiced_lease_waits_abandoned_total") for s in instances) <= abandoned:
        F.fail("mechanisms not exercised", "no instance saw the waiter leave")
    for h in handles:
        client.call("DELETE", "/v1/leases/" + h)


def final_checks(store, instances, haproxy):
    over = {k: n for k, n in WINDOWS.admitted.items() if n > CHECK_LIMIT}
    for (account, window), n in sorted(over.items()):
        F.fail("windows over the limit",
               "%d checks of %s admitted in second %d" % (n, account, window))
    full = sum(1 for n in WINDOWS.admitted.values() if n >= CHECK_LIMIT)
    F.count("windows filled to the limit", full)
    if full < 10:
        F.fail("mechanisms not exercised", "only %d windows filled to the limit" % full)

    # Spread: every instance answered a fair part of the calls (an RLQS stream stays on
    # the instance it opened on: of those, some).
    for kind, part in (("http checks", 0.1), ("rls checks", 0.1), ("rlqs answers", 0.0)):
        per = {s.name: F.counts["%s via %s" % (kind, s.name)] for s in instances}
        total = sum(per.values())
        for name, n in per.items():
            if n == 0 or n < part * total:
                F.fail("instances left out", "%s: %s answered %d of %d" % (kind, name, n, total))
    rows = haproxy.stats()
    for backend in ("sluiced_http", "sluiced_grpc"):
        for s in instances:
            F.count("haproxy %s/%s requests" % (backend, s.name),
                    int(rows[(backend, s.name)]["stot"]))
            if int(rows[(backend, s.name)]["stot"]) == 0:
                F.fail("instances left out", "HAProxy sent nothing to %s/%s" % (backend, s.name))
        # The retry rule covered the stopping instances: with `option redispatch 1` every
        # retry goes to another instance and counts as a redispatch.
        row = rows[(backend, "BACKEND")]
        F.count("haproxy %s retries on the same instance" % backend, int(row["wretr"] or 0))
        F.count("haproxy %s retries on another instance" % backend, int(row["wredis"] or 0))
        if int(row["wredis"] or 0) == 0:
            F.fail("mechanisms not exercised", "HAProxy retried no call of " + backend)

    # The monitor read the lease sets and quota buckets it was meant to (not other keys).
    needs = {"samples of Redis": 50,
             "most live leases of one id seen in Redis": LEASE_CAP,
             "highest sum of a bucket's live grants seen in Redis, per second": 1,
             "heartbeats through another instance than the granter": 1,
             "leases that outlived the restart of the instance that granted them": 1,
             "lease acquires refused at the cap": 1,
             "rlqs streams ended by a roll and reopened": RLQS_CLIENTS}
    for what, least in needs.items():
        if F.counts[what] < least:
            F.fail("mechanisms not exercised",
                   "%s: %d, expected at least %d" % (what, F.counts[what], least))
    if HOLDERS.max_held < LEASE_CAP:
        F.fail("mechanisms not exercised", "callers never held %d leases at once" % LEASE_CAP)
    for n in range(RLQS_CLIENTS):
        if F.counts["rlqs client %d reconnects" % n] < 1:
            F.fail("mechanisms not exercised", "rlqs client %d was never moved by a roll" % n)
    if RLQS_WAITING:
        F.fail("RLQS clients moved by a roll without a share again by the end",
               str(sorted(RLQS_WAITING)))

    # No key without an expiry.
    no_ttl = []
    keys = 0
    for c in store.primaries():
        for key in scan_keys(c):
            keys += 1
            if c.call("TTL", key) == -1:
                no_ttl.append(key.decode())
        c.close()
    F.count("keys at the end", keys)
    for key in no_ttl:
        F.fail("keys without an expiry", key)


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluiced", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--store", choices=("standalone", "cluster"), default="standalone")
    long_mode = os.environ.get("SLUICE_FLEET_LONG", "") not in ("", "0")
    parser.add_argument("--rounds", type=int, default=5 if long_mode else 2)
    parser.add_argument("--pause-s", type=float, default=3 if long_mode else 1,
                        help="load alone between two restarts")
    parser.add_argument("--tail-s", type=float, default=20 if long_mode else 6,
                        help="load alone after the last restart")
    return parser.parse_args()


def start_fleet(procs, args):
    """Redis, three sluiced and HAProxy in front of them, every one ready."""
    rls_client.compile_protos(os.path.join(args.source_dir, "service", "proto"), procs.workdir)
    config_dir = os.path.join(procs.workdir, "config")
    os.mkdir(config_dir)
    with open(os.path.join(config_dir, "fleet.yaml"), "w") as f:
        f.write(CONFIG)
    store = Store(procs, args.store)
    instances = [Sluiced(n + 1, procs, args.sluiced, config_dir, store.url)
                 for n in range(INSTANCES)]
    for s in instances:
        s.start()
    for s in instances:
        wait_for(s.name + " ready", s.ready, 15)
    haproxy = Haproxy(procs, os.path.join(args.source_dir, "examples", "haproxy.cfg"), instances)
    wait_for("HAProxy to see every instance up",
             lambda: all(haproxy.up(s.name) for s in instances), 15)
    log("store %s, sluiced %s, haproxy http %d grpc %d; logs in %s" % (
        store.url, [s.http for s in instances], haproxy.http, haproxy.grpc, procs.workdir))
    return store, instances, haproxy


def start_load(store, haproxy, seed, stop):
    """The Redis monitor and every kind of caller, each on its own thread (returned)."""
    threads = []

    def run(fn, *fargs):
        def guarded():
            try:
                fn(*fargs)
            except Exception as e:  # noqa: BLE001 (a thread that dies checks nothing)
                F.fail("harness", "%s stopped: %r" % (fn.__name__, e))
                stop.set()

        t = threading.Thread(target=guarded, daemon=True)
        t.start()
        threads.append(t)

    run(monitor, store, stop)
    # The RLQS streams first, alone: round robin puts them on every instance.
    for n in range(RLQS_CLIENTS):
        run(rlqs_client_loop, haproxy.grpc, n, stop)
    wait_for("every RLQS client's first assignment",
             lambda: F.counts["rlqs token buckets assigned"] >= RLQS_CLIENTS, 10)
    for w in range(4):
        run(http_checks, haproxy.http, w, stop)
        run(rls_checks, haproxy.grpc, w, stop)
    rng = random.Random(seed)
    for account in LEASE_ACCOUNTS:
        for _ in range(LEASE_HOLDERS_PER_ACCOUNT):
            run(lease_holder, haproxy.http, account, random.Random(rng.random()), stop)
    return threads


def print_summary(started):
    for what, n in sorted(F.counts.items()):
        print("  %-75s %d" % (what, n))
    print("  %-75s %.1f" % ("highest sum of the RLQS assignments Envoys kept in force, per second",
                            ASSIGNMENTS.max_sum))
    print("  %-75s %.1f" % ("elapsed, s", time.time() - started))
    for kind, n in sorted(F.failure_counts.items()):
        print("FAIL %s: %d" % (kind, n))
        for detail in F.failures[kind]:
            print("    " + detail[:300])


def main():
    args = parse_args()
    for program in ("haproxy", "redis-server", "redis-cli"):
        if shutil.which(program) is None:
            print("fleet test: %s is not installed (scripts/setup.sh installs it)" % program)
            return 1
    seed = int(os.environ.get("SLUICE_FLEET_SEED", "0") or 0) or random.randrange(1, 1 << 31)
    log("fleet test: store %s, %d rounds, seed %d (SLUICE_FLEET_SEED)" % (args.store,
                                                                            args.rounds, seed))
    started = time.time()
    procs = Processes(tempfile.mkdtemp(prefix="sluice-fleet-"))
    stop = threading.Event()
    try:
        store, instances, haproxy = start_fleet(procs, args)
        threads = start_load(store, haproxy, seed, stop)
        time.sleep(4)  # every kind of call under way, leases at the cap
        drains = roll(instances, haproxy, args.rounds, args.pause_s)
        time.sleep(args.tail_s)
        stop.set()
        for t in threads:
            t.join(timeout=30)
            if t.is_alive():
                F.fail("harness", "a load thread did not stop within 30 s")
        F.count("longest drain, ms", int(max(drains) * 1000))
        waiter_that_leaves(store, instances, haproxy.http)
        final_checks(store, instances, haproxy)
    except Exception as e:  # noqa: BLE001 (the harness itself failed: say where)
        stop.set()
        F.fail("harness", "the test stopped: %r" % e)
        traceback.print_exc()
    finally:
        procs.stop_all()
    print_summary(started)
    if F.failure_count == 0:
        shutil.rmtree(procs.workdir, ignore_errors=True)
        print("fleet test: all checks passed")
        return 0
    print("fleet test: FAILED (%d findings); logs kept in %s" % (F.failure_count, procs.workdir))
    return 1


if __name__ == "__main__":
    sys.exit(main())
