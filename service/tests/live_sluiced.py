"""A private redis-server and one built sluiced on free loopback ports, for the Python tests
of what a user runs against sluiced (the OpenAPI description, the client examples, the
Envoy example). Everything started here is stopped by its own pid, in stop() or at exit.

    with LiveSluiced(sluiced_path, config_dir, admin_token="t") as s:
        s.http, s.grpc, s.admin, s.metrics   # the ports
        s.stop_redis()                       # checks then answer by their failure policy
"""
import atexit
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time


def free_ports(n):
    """n distinct loopback ports that were free a moment ago."""
    held = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        held.append(s)
    ports = [s.getsockname()[1] for s in held]
    for s in held:
        s.close()
    return ports


def wait_for(what, predicate, timeout_s=10.0, interval_s=0.05):
    until = time.monotonic() + timeout_s
    while time.monotonic() < until:
        if predicate():
            return
        time.sleep(interval_s)
    raise RuntimeError("timed out after %.1f s waiting for %s" % (timeout_s, what))


def clear_of_minute_boundary(margin_s=8):
    """Fixed windows of a minute are aligned to the minute: a sequence of calls that
    straddled one would start afresh halfway. Waits, if need be, until the next minute has
    begun, so that `margin_s` seconds of calls fit in one window."""
    into = time.time() % 60
    if into > 60 - margin_s:
        time.sleep(60 - into + 0.2)


def request(port, method, path, body=None, headers=None, timeout=5.0):
    """One HTTP/1.1 call on its own connection: (status, headers as a dict of lists keyed
    by lower-case name, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        h = dict(headers or {})
        if data is not None:
            h.setdefault("Content-Type", "application/json")
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        got = {}
        for k, v in r.getheaders():
            got.setdefault(k.lower(), []).append(v)
        return r.status, got, r.read()
    finally:
        c.close()


class LiveSluiced:
    def __init__(self, sluiced, config_dir, admin_token=None, extra_args=(),
                 deadline_ms=1000):
        self.sluiced, self.config_dir = os.path.abspath(sluiced), os.path.abspath(config_dir)
        self.admin_token, self.extra_args, self.deadline_ms = admin_token, extra_args, deadline_ms
        self.workdir = tempfile.mkdtemp(prefix="live-sluiced-")
        self.redis_port, self.http, self.grpc, self.admin, self.metrics = free_ports(5)
        self.redis = self.process = None
        atexit.register(self.stop)

    def __enter__(self):
        self.start_redis()
        self.start_sluiced()
        return self

    def __exit__(self, *exc):
        self.stop()

    def _spawn(self, name, argv):
        log = open(os.path.join(self.workdir, name + ".log"), "ab")
        try:
            return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        finally:
            log.close()

    def start_redis(self):
        self.redis = self._spawn("redis", [
            "redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1",
            "--dir", self.workdir, "--save", "", "--appendonly", "no"])
        wait_for("redis-server on %d" % self.redis_port, self._redis_pings)

    def _redis_pings(self):
        if self.redis.poll() is not None:
            raise RuntimeError("redis-server exited %s" % self.redis.returncode)
        try:
            with socket.create_connection(("127.0.0.1", self.redis_port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop_redis(self):
        if self.redis and self.redis.poll() is None:
            self.redis.kill()
            self.redis.wait()

    def start_sluiced(self):
        argv = [self.sluiced, "--config", self.config_dir,
                "--redis", "redis://127.0.0.1:%d" % self.redis_port,
                "--http-listen", "127.0.0.1:%d" % self.http,
                "--grpc-listen", "127.0.0.1:%d" % self.grpc,
                "--admin-listen", "127.0.0.1:%d" % self.admin,
                "--metrics-listen", "127.0.0.1:%d" % self.metrics,
                # Generous for a loaded 2-core machine: a deadline missed for want of CPU
                # would be answered by policy, which is not what these tests are about.
                "--deadline-ms", str(self.deadline_ms),
                "--audit-log", os.path.join(self.workdir, "audit.log")]
        argv += list(self.extra_args)
        if self.admin_token:
            argv += ["--admin-token", self.admin_token]
        self.process = self._spawn("sluiced", argv)
        wait_for("sluiced ready", self._ready)

    def _ready(self):
        if self.process.poll() is not None:
            raise RuntimeError("sluiced exited %s at start:\n%s" % (self.process.returncode,
                                                                     self.log()))
        try:
            status, _, body = request(self.http, "GET", "/readyz", timeout=1)
            return status == 200 and b'"ready"' in body
        except OSError:
            return False

    def stop_sluiced(self):
        """SIGTERM (sluiced drains and exits 0); the exit code."""
        if not self.process or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return "killed after 15 s"

    def log(self):
        try:
            with open(os.path.join(self.workdir, "sluiced.log"), errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def stop(self):
        self.stop_sluiced()
        self.stop_redis()
        if os.path.isdir(self.workdir):
            shutil.rmtree(self.workdir, ignore_errors=True)
