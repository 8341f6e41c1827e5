#!/usr/bin/python3
"""A Python client of sluiced's RLQS (Envoy's Rate Limit Quota Service v3) whose messages are
a second copy, written here from Envoy's published field numbers (not generated from
service/proto), over grpcio (python3-grpcio). Runs against a sluiced started with
service/tests/rlqs_test.cc's config and --rlqs-report-interval-ms 1000.
Usage: rlqs_client.py PORT. Exit 0 when every check passed."""
import queue
import sys
import time

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf import duration_pb2, wrappers_pb2  # noqa: F401 (in the default pool)

F = descriptor_pb2.FieldDescriptorProto
METHOD = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas"


def field(msg, name, number, kind, type_name=None, repeated=False, oneof=None):
    f = msg.field.add(name=name, number=number, type=kind,
                      label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
    if type_name:
        f.type_name = type_name
    if oneof is not None:
        f.oneof_index = oneof
    return f


def build_pool():
    """The messages, by Envoy's field numbers: envoy.type.v3 TokenBucket and
    RateLimitStrategy, envoy.service.rate_limit_quota.v3 reports and responses."""
    pool = descriptor_pool.DescriptorPool()
    for dep in ("google/protobuf/duration.proto", "google/protobuf/wrappers.proto"):
        fdp = descriptor_pb2.FileDescriptorProto()
        descriptor_pool.Default().FindFileByName(dep).CopyToProto(fdp)
        pool.Add(fdp)
    t = descriptor_pb2.FileDescriptorProto(name="copy/type.proto", package="envoy.type.v3",
                                           syntax="proto3")
    t.dependency.extend(["google/protobuf/duration.proto", "google/protobuf/wrappers.proto"])
    tb = t.message_type.add(name="TokenBucket")
    field(tb, "max_tokens", 1, F.TYPE_UINT32)
    field(tb, "tokens_per_fill", 2, F.TYPE_MESSAGE, ".google.protobuf.UInt32Value")
    field(tb, "fill_interval", 3, F.TYPE_MESSAGE, ".google.protobuf.Duration")
    st = t.message_type.add(name="RateLimitStrategy")
    rule = st.enum_type.add(name="BlanketRule")
    rule.value.add(name="ALLOW_ALL", number=0)
    rule.value.add(name="DENY_ALL", number=1)
    st.oneof_decl.add(name="strategy")
    field(st, "blanket_rule", 1, F.TYPE_ENUM, ".envoy.type.v3.RateLimitStrategy.BlanketRule",
          oneof=0)
    field(st, "token_bucket", 3, F.TYPE_MESSAGE, ".envoy.type.v3.TokenBucket", oneof=0)
    pool.Add(t)

    s = descriptor_pb2.FileDescriptorProto(name="copy/rlqs.proto",
                                           package="envoy.service.rate_limit_quota.v3",
                                           syntax="proto3")
    s.dependency.extend(["google/protobuf/duration.proto", "copy/type.proto"])
    bid = s.message_type.add(name="BucketId")
    entry = bid.nested_type.add(name="BucketEntry")
    entry.options.map_entry = True
    field(entry, "key", 1, F.TYPE_STRING)
    field(entry, "value", 2, F.TYPE_STRING)
    field(bid, "bucket", 1, F.TYPE_MESSAGE,
          ".envoy.service.rate_limit_quota.v3.BucketId.BucketEntry", repeated=True)
    rep = s.message_type.add(name="Reports")
    usage = rep.nested_type.add(name="Usage")
    field(usage, "bucket_id", 1, F.TYPE_MESSAGE, ".envoy.service.rate_limit_quota.v3.BucketId")
    field(usage, "time_elapsed", 2, F.TYPE_MESSAGE, ".google.protobuf.Duration")
    field(usage, "num_requests_allowed", 3, F.TYPE_UINT64)
    field(usage, "num_requests_denied", 4, F.TYPE_UINT64)
    field(rep, "domain", 1, F.TYPE_STRING)
    field(rep, "bucket_quota_usages", 2, F.TYPE_MESSAGE,
          ".envoy.service.rate_limit_quota.v3.Reports.Usage", repeated=True)
    resp = s.message_type.add(name="Response")
    act = resp.nested_type.add(name="Action")
    qa = act.nested_type.add(name="Assignment")
    field(qa, "assignment_time_to_live", 2, F.TYPE_MESSAGE, ".google.protobuf.Duration")
    field(qa, "rate_limit_strategy", 3, F.TYPE_MESSAGE, ".envoy.type.v3.RateLimitStrategy")
    act.nested_type.add(name="Abandon")
    act.oneof_decl.add(name="bucket_action")
    field(act, "bucket_id", 1, F.TYPE_MESSAGE, ".envoy.service.rate_limit_quota.v3.BucketId")
    field(act, "quota_assignment_action", 2, F.TYPE_MESSAGE,
          ".envoy.service.rate_limit_quota.v3.Response.Action.Assignment", oneof=0)
    field(act, "abandon_action", 3, F.TYPE_MESSAGE,
          ".envoy.service.rate_limit_quota.v3.Response.Action.Abandon", oneof=0)
    field(resp, "bucket_action", 1, F.TYPE_MESSAGE,
          ".envoy.service.rate_limit_quota.v3.Response.Action", repeated=True)
    pool.Add(s)
    factory = message_factory.MessageFactory(pool)

    def cls(name):
        return factory.GetPrototype(pool.FindMessageTypeByName(name))

    return (cls("envoy.service.rate_limit_quota.v3.Reports"),
            cls("envoy.service.rate_limit_quota.v3.Response"))


Reports, Response = build_pool()


class Stream:
    """One bidirectional stream: reports go in through a queue, answers come back in order."""

    def __init__(self, channel):
        self.out = queue.Queue()
        call = channel.stream_stream(METHOD, request_serializer=lambda b: b,
                                     response_deserializer=Response.FromString)
        self.call = call(iter(self.out.get, None), timeout=30)

    def send_raw(self, data):
        self.out.put(data)

    def exchange(self, buckets, allowed, denied, elapsed, domain="fleet"):
        r = Reports(domain=domain)
        for b in buckets:
            u = r.bucket_quota_usages.add(num_requests_allowed=allowed,
                                          num_requests_denied=denied)
            u.time_elapsed.seconds = elapsed
            for k, v in b.items():
                u.bucket_id.bucket[k] = v
        self.out.put(r.SerializeToString())
        return next(self.call)

    def close(self):
        self.out.put(None)

    def cancel(self):
        self.call.cancel()


def rate(action):
    tb = action.quota_assignment_action.rate_limit_strategy.token_bucket
    return tb.tokens_per_fill.value / tb.fill_interval.seconds if tb.fill_interval.seconds else 0


def main():
    port = sys.argv[1]
    channel = grpc.insecure_channel("127.0.0.1:" + port)
    hot = {"route": "hot"}
    deny = 1

    # Subscription: a token bucket at once, with a TTL of 2 s (twice the interval).
    a = Stream(channel)
    sub = a.exchange([hot], 1, 0, 0).bucket_action[0]
    assert sub.bucket_id.bucket["route"] == "hot", sub
    assert sub.quota_assignment_action.assignment_time_to_live.seconds == 2, sub
    assert sub.quota_assignment_action.rate_limit_strategy.HasField("token_bucket"), sub
    # A report of 300/s: the whole limit (100/s) but the reserve kept for newcomers (100/64),
    # capacity floor(20 * 98.4 / 100); 98.438/s as 1,575 tokens per 16 s (98.4375/s).
    full = a.exchange([hot], 100, 200, 1).bucket_action[0]
    tb = full.quota_assignment_action.rate_limit_strategy.token_bucket
    assert (tb.tokens_per_fill.value, tb.fill_interval.seconds, tb.max_tokens) == (1575, 16, 19), full
    # A second client: the sum of grants never exceeds the limit.
    b = Stream(channel)
    gb = rate(b.exchange([hot], 100, 0, 1).bucket_action[0])
    assert gb + rate(full) <= 100, (gb, full)
    # A stream reset gives its share back: the other client gets the whole limit.
    a.cancel()
    got = 0
    for _ in range(60):  # the reset reaches sluiced at its pace: up to 3 s
        got = rate(b.exchange([hot], 300, 0, 1).bucket_action[0])
        if got == 1575 / 16:  # all but the reserve: 98.438/s, as 1,575 tokens per 16 s
            break
        time.sleep(0.05)
    assert got == 1575 / 16, got
    # Blanket answers: unknown domain (allow_all by default), 0 per unit (deny).
    c = Stream(channel)
    unknown = c.exchange([hot], 1, 0, 0, domain="nowhere").bucket_action[0]
    assert unknown.quota_assignment_action.rate_limit_strategy.WhichOneof("strategy") == \
        "blanket_rule", unknown
    assert unknown.quota_assignment_action.rate_limit_strategy.blanket_rule == 0, unknown
    d = Stream(channel)
    blocked = d.exchange([{"route": "blocked"}], 1, 0, 0).bucket_action[0]
    assert blocked.quota_assignment_action.rate_limit_strategy.blanket_rule == deny, blocked
    # Abandon: three idle reports in a row.
    actions = [d.exchange([hot], 0, 0, 1).bucket_action[0] for _ in range(4)]
    assert actions[0].HasField("quota_assignment_action"), actions
    assert any(x.HasField("abandon_action") for x in actions), actions
    # A malformed report ends the stream INVALID_ARGUMENT.
    e = Stream(channel)
    e.send_raw(b"\xff\xff\xff")
    try:
        next(e.call)
        raise AssertionError("a malformed report was answered")
    except grpc.RpcError as err:
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
    # Every request iterator ends, so that no grpcio thread keeps the interpreter alive.
    for s in (a, b, c, d, e):
        s.close()
    channel.close()
    print("python rlqs client: all checks passed")


if __name__ == "__main__":
    main()
