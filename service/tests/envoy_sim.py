#!/usr/bin/python3
"""A simulated Envoy `rate_limit_quota` filter: the RLQS client side as Envoy's filter does it,
over grpcio, with messages generated from service/proto (Envoy's own rlqs.proto and
ratelimit_strategy.proto) by grpc_tools.

Written from Envoy's source/extensions/filters/http/rate_limit_quota/: global_client_impl.cc at
envoyproxy/envoy commit c33e7f824b9946853a80e839d6e80ef2a09f3bb4 (and at the earlier
0b559611553841f503171457578e8fcea6a82b17, whose new token buckets start full), filter.cc at
00536345a1f49ef19c1869253c7ce4d24be5ab58. What it does as Envoy does:
- the first request of a bucket creates it (counted by the no-assignment behaviour: allowed
  here) and sends at once a report of that one bucket, time_elapsed 0;
- each periodic report holds every bucket it has (none: a report with the domain only),
  time_elapsed in whole seconds (truncated), the counts reset;
- the stream opens on the first bucket and, once closed by the server, reopens on the next
  periodic report (the usage collected meanwhile goes into it);
- an answer for a bucket it does not hold is ignored; an abandon forgets the bucket;
- a token bucket assignment replaces the running one only when max_tokens,
  tokens_per_fill or the NANOS of fill_interval differ (protoTokenBucketsEq); the new one
  fills at tokens_per_fill / (fill_interval truncated to whole seconds) per second, starts
  with the old one's fill ratio (current releases) or full (older ones: keep_fill_ratio
  False), and refills continuously up to max_tokens (AtomicTokenBucketImpl);
- an assignment lasts the whole seconds of its TTL (nanos ignored), then the bucket goes
  back to its no-assignment behaviour (no fallback configured).
Options model what other clients may do: domain_every_report False sends the domain in a
stream's first report only (the proto allows it)."""
import atexit
import math
import os
import queue
import shutil
import sys
import tempfile
import threading
import time

import grpc

METHOD = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas"
_PB = None


def messages(proto_dir):
    """rlqs_pb2 and ratelimit_strategy_pb2, generated once per process from proto_dir."""
    global _PB
    if _PB is None:
        from grpc_tools import protoc
        out = tempfile.mkdtemp(prefix="envoy-sim-")
        # The generated modules are imported from here; removed when the process ends.
        atexit.register(shutil.rmtree, out, True)
        well_known = os.path.join(os.path.dirname(protoc.__file__), "_proto")
        protos = []
        for root, _, files in os.walk(proto_dir):
            protos += [os.path.relpath(os.path.join(root, f), proto_dir)
                       for f in files if f.endswith(".proto")]
        rc = protoc.main(["protoc", "-I" + proto_dir, "-I" + well_known,
                          "--python_out=" + out] + sorted(protos))
        if rc != 0:
            sys.exit("protoc failed: %d" % rc)
        sys.path.insert(0, out)
        from envoy.service.rate_limit_quota.v3 import rlqs_pb2
        from envoy.type.v3 import ratelimit_strategy_pb2
        _PB = (rlqs_pb2, ratelimit_strategy_pb2)
    return _PB


class TokenBucket:
    """Envoy's AtomicTokenBucketImpl: `rate` tokens a second, continuously, up to `capacity`."""

    def __init__(self, capacity, rate, initial, now):
        self.capacity, self.rate = float(capacity), rate
        self.tokens, self.at = min(float(initial), self.capacity), now

    def remaining(self, now):
        if self.rate == math.inf:
            return self.capacity
        return min(self.capacity, self.tokens + (now - self.at) * self.rate)

    def consume(self, now):
        self.tokens, self.at = self.remaining(now), now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


def tb_key(tb):
    """What Envoy compares to decide whether an assignment changed."""
    return (tb.max_tokens, tb.tokens_per_fill.value, tb.fill_interval.nanos)


def enforced_rate(tb):
    """Requests a second Envoy admits under `tb`: tokens_per_fill over whole seconds."""
    seconds = int(tb.fill_interval.seconds + tb.fill_interval.nanos / 1e9)
    return math.inf if seconds == 0 else tb.tokens_per_fill.value / seconds


class Bucket:
    def __init__(self, bucket_id, now, allowed):
        self.bucket_id = dict(bucket_id)
        self.allowed, self.denied = (1, 0) if allowed else (0, 1)
        self.last_report = now
        self.action = None        # the assignment in force (a BucketAction), or None
        self.limiter = None       # its TokenBucket
        self.expires = 0.0
        self.answers = 0          # actions received for this bucket
        self.replaced = 0         # token buckets (re)built


class SimEnvoy:
    def __init__(self, channel, proto_dir, domain, default_allow=True, domain_every_report=True,
                 keep_fill_ratio=True, clock=time.monotonic):
        self.pb, self.strategy_pb = messages(proto_dir)
        self.channel, self.domain = channel, domain
        self.default_allow = default_allow
        self.domain_every_report = domain_every_report
        self.keep_fill_ratio = keep_fill_ratio
        self.clock = clock
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.buckets = {}
        self.out = None           # the open stream's request queue, or None
        self.call = None
        self.sent_on_stream = 0
        self.streams_opened = 0
        self.closes = []          # (grpc code, details) of each stream the server ended
        self.unexpected = 0       # actions for buckets it does not hold

    @staticmethod
    def key(bucket_id):
        return tuple(sorted(bucket_id.items()))

    # --- the stream ------------------------------------------------------------------------

    def _open(self):
        """With the lock held."""
        out = queue.Queue()
        call = self.channel.stream_stream(
            METHOD, request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=self.pb.RateLimitQuotaResponse.FromString)(
                iter(out.get, None), timeout=120)
        self.out, self.call, self.sent_on_stream = out, call, 0
        self.streams_opened += 1
        threading.Thread(target=self._read, args=(call,), daemon=True).start()

    def _read(self, call):
        try:
            for response in call:
                self._apply(response)
            code, details = grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            code, details = e.code(), e.details()
        with self.lock:
            self.closes.append((code, details))
            if self.call is call:
                self.out, self.call = None, None
            self.changed.notify_all()

    def _send(self, report):
        """With the lock held: on the open stream (Envoy drops a report with no stream)."""
        if self.out is None:
            return False
        if not self.domain_every_report and self.sent_on_stream > 0:
            report.ClearField("domain")
        self.out.put(report)
        self.sent_on_stream += 1
        return True

    def reset_stream(self):
        """The stream is reset (Envoy's connection to the server is lost)."""
        with self.lock:
            call, self.out, self.call = self.call, None, None
        if call is not None:
            call.cancel()

    def close(self):
        with self.lock:
            out, call = self.out, self.call
            self.out, self.call = None, None
        if out is not None:
            out.put(None)
        if call is not None:
            call.cancel()

    # --- requests and reports --------------------------------------------------------------

    def _usage(self, report, b, now):
        u = report.bucket_quota_usages.add(num_requests_allowed=b.allowed,
                                           num_requests_denied=b.denied)
        for k, v in b.bucket_id.items():
            u.bucket_id.bucket[k] = v
        u.time_elapsed.seconds = int(now - b.last_report)  # whole seconds, truncated
        b.allowed, b.denied, b.last_report = 0, 0, now

    def _expire(self, b, now):
        if b.action is not None and now >= b.expires:
            b.action, b.limiter = None, None

    def hit(self, bucket_id):
        """One request matching `bucket_id`: True when admitted."""
        now = self.clock()
        with self.lock:
            k = self.key(bucket_id)
            b = self.buckets.get(k)
            if b is None:
                b = self.buckets[k] = Bucket(bucket_id, now, self.default_allow)
                if self.out is None:
                    self._open()
                report = self.pb.RateLimitQuotaUsageReports(domain=self.domain)
                self._usage(report, b, now)  # its first request, then the counts reset
                self._send(report)
                return self.default_allow
            self._expire(b, now)
            allowed = self.default_allow
            if b.action is not None:
                strategy = b.action.quota_assignment_action.rate_limit_strategy
                if strategy.HasField("token_bucket"):
                    allowed = b.limiter.consume(now)
                else:
                    allowed = strategy.blanket_rule == self.strategy_pb.RateLimitStrategy.ALLOW_ALL
            if allowed:
                b.allowed += 1
            else:
                b.denied += 1
            return allowed

    def report(self):
        """The periodic report: every bucket (the stream reopened first when it was closed)."""
        now = self.clock()
        with self.lock:
            if self.out is None:
                self._open()
            report = self.pb.RateLimitQuotaUsageReports(domain=self.domain)
            for b in self.buckets.values():
                self._usage(report, b, now)
            return self._send(report)

    def report_usage(self, bucket_id, allowed, denied, seconds):
        """Sets a bucket's usage since its last report (a load this test does not replay
        request by request), as if `seconds` had passed."""
        with self.lock:
            b = self.buckets[self.key(bucket_id)]
            b.allowed, b.denied = allowed, denied
            b.last_report = self.clock() - seconds

    # --- answers ---------------------------------------------------------------------------

    def _apply(self, response):
        now = self.clock()
        with self.lock:
            for action in response.bucket_action:
                b = self.buckets.get(self.key(dict(action.bucket_id.bucket)))
                if b is None:
                    self.unexpected += 1
                    continue
                b.answers += 1
                if action.HasField("abandon_action"):
                    del self.buckets[self.key(b.bucket_id)]
                    continue
                if not action.HasField("quota_assignment_action"):
                    continue
                strategy = action.quota_assignment_action.rate_limit_strategy
                self._expire(b, now)
                if strategy.HasField("token_bucket"):
                    old = b.action.quota_assignment_action.rate_limit_strategy \
                        if b.action is not None else None
                    if old is None or not old.HasField("token_bucket") or \
                            tb_key(old.token_bucket) != tb_key(strategy.token_bucket):
                        tb = strategy.token_bucket
                        initial = tb.max_tokens
                        if self.keep_fill_ratio and b.limiter is not None:
                            initial = tb.max_tokens * (b.limiter.remaining(now) /
                                                       b.limiter.capacity)
                        b.limiter = TokenBucket(tb.max_tokens, enforced_rate(tb), initial, now)
                        b.replaced += 1
                else:
                    b.limiter = None
                b.action = action
                b.expires = now + action.quota_assignment_action.assignment_time_to_live.seconds
            self.changed.notify_all()

    def wait_answered(self, counts, timeout_s):
        """Waits until each bucket in `counts` (key -> answers before) has a newer answer, or
        the stream ended; True when all were answered."""
        until = time.monotonic() + timeout_s
        with self.lock:
            closes = len(self.closes)
            while True:
                pending = [k for k, n in counts.items()
                           if k in self.buckets and self.buckets[k].answers <= n]
                if not pending:
                    return True
                if len(self.closes) > closes:
                    return False
                left = until - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)

    def answers(self):
        with self.lock:
            return {k: b.answers for k, b in self.buckets.items()}

    def strategy(self, bucket_id):
        """The assignment in force for a bucket (a RateLimitStrategy), or None."""
        with self.lock:
            b = self.buckets.get(self.key(bucket_id))
            if b is None:
                return None
            self._expire(b, self.clock())
            return None if b.action is None else b.action.quota_assignment_action.rate_limit_strategy

    def enforced(self, bucket_id):
        """Requests a second this Envoy admits for the bucket now: its token bucket's fill
        rate, infinity for ALLOW_ALL (and no assignment with allow as default), 0 for DENY_ALL."""
        with self.lock:
            b = self.buckets.get(self.key(bucket_id))
            if b is None:
                return None
            self._expire(b, self.clock())
            if b.action is None:
                return math.inf if self.default_allow else 0.0
            if b.limiter is not None:
                return b.limiter.rate
            s = b.action.quota_assignment_action.rate_limit_strategy
            return math.inf if s.blanket_rule == self.strategy_pb.RateLimitStrategy.ALLOW_ALL \
                else 0.0
