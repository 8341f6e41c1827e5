#!/usr/bin/python3
"""A Python client of sluiced's Envoy RLS v3 service: stubs generated from service/proto
by grpc_tools (Debian's python3-grpc-tools) into a temporary directory, then calls over
grpcio (python3-grpcio). Usage: rls_client.py PORT PROTO_DIR OUT_DIR. Exit 0 when every
check passed."""
import os
import sys

import grpc
from grpc_tools import protoc


def compile_protos(proto_dir, out_dir):
    """Generates the Python messages and stubs of every .proto under proto_dir into out_dir
    and puts out_dir on the import path."""
    well_known = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    protos = []
    for root, _, files in os.walk(proto_dir):
        protos += [os.path.relpath(os.path.join(root, f), proto_dir) for f in files if f.endswith(".proto")]
    rc = protoc.main(["protoc", "-I" + proto_dir, "-I" + well_known, "--python_out=" + out_dir,
                      "--grpc_python_out=" + out_dir] + sorted(protos))
    if rc != 0:
        sys.exit("protoc failed: %d" % rc)
    sys.path.insert(0, out_dir)


def main():
    port, proto_dir, out_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    compile_protos(proto_dir, out_dir)
    from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
    from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2

    channel = grpc.insecure_channel("127.0.0.1:" + port)
    stub = rls_pb2_grpc.RateLimitServiceStub(channel)

    from google.protobuf import wrappers_pb2

    def request(account, hits=0, domain="shop", descriptor_hits=None):
        d = ratelimit_pb2.RateLimitDescriptor(entries=[
            ratelimit_pb2.RateLimitDescriptor.Entry(key=b"route", value=b"seat_map"),
            ratelimit_pb2.RateLimitDescriptor.Entry(key=b"session", value=account.encode())])
        if descriptor_hits is not None:
            d.hits_addend.CopyFrom(wrappers_pb2.UInt64Value(value=descriptor_hits))
        return rls_pb2.RateLimitRequest(domain=domain, descriptors=[d], hits_addend=hits)

    ok = rls_pb2.RateLimitResponse.OK
    over = rls_pb2.RateLimitResponse.OVER_LIMIT
    for i in range(5):
        r = stub.ShouldRateLimit(request("py-session"), timeout=5)
        assert r.overall_code == ok, r
        assert r.statuses[0].current_limit.requests_per_unit == 5, r
        assert r.statuses[0].current_limit.name == "seat_map", r
    r = stub.ShouldRateLimit(request("py-session"), timeout=5)
    assert r.overall_code == over, r
    headers = {h.key: h.value for h in r.response_headers_to_add}
    assert headers["RateLimit-Policy"] == '"seat_map";q=5;w=60', headers
    r = stub.ShouldRateLimit(request("py-other", hits=5), timeout=5)
    assert r.overall_code == ok and r.statuses[0].limit_remaining == 0, r
    r = stub.ShouldRateLimit(request("x", domain="unknown-domain"), timeout=5)
    assert r.overall_code == ok, r
    # Per-descriptor hits_addend: an explicit 0 checks without spending, 4 spends 4 of 5
    # (the request's own hits_addend of 2 is overridden), then 1 is left.
    r = stub.ShouldRateLimit(request("py-peek", descriptor_hits=0), timeout=5)
    assert r.overall_code == ok and r.statuses[0].limit_remaining == 5, r
    r = stub.ShouldRateLimit(request("py-peek", hits=2, descriptor_hits=4), timeout=5)
    assert r.overall_code == ok and r.statuses[0].limit_remaining == 1, r
    r = stub.ShouldRateLimit(request("py-peek", descriptor_hits=2), timeout=5)
    assert r.overall_code == over, r
    r = stub.ShouldRateLimit(request("py-peek"), timeout=5)
    assert r.overall_code == ok and r.statuses[0].limit_remaining == 0, r
    # No descriptors at all: nothing to limit.
    r = stub.ShouldRateLimit(rls_pb2.RateLimitRequest(domain="shop"), timeout=5)
    assert r.overall_code == ok and len(r.statuses) == 0, r
    # grpc.health.v1 Check with an empty request: status SERVING (field 1 = 1).
    health = channel.unary_unary("/grpc.health.v1.Health/Check",
                                 request_serializer=lambda b: b, response_deserializer=lambda b: b)
    assert health(b"", timeout=5) == b"\x08\x01"
    # Server reflection: ListServices (field 7) names the rate limit service.
    reflection = channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                       request_serializer=lambda b: b, response_deserializer=lambda b: b)
    replies = list(reflection(iter([b"\x3a\x00"]), timeout=5))
    assert replies and b"envoy.service.ratelimit.v3.RateLimitService" in replies[0], replies
    print("python rls client: all checks passed")


if __name__ == "__main__":
    main()
