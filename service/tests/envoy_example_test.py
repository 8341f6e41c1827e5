#!/usr/bin/python3
"""The Envoy examples (examples/envoy/) against a live sluiced on examples/config, without an
Envoy binary (Debian 12 packages none): this test reads the example's YAML and applies
Envoy's documented rules to sample requests, so that what it sends is what that Envoy would
send, and the example and the test cannot drift apart.

RLS (envoy-rls.yaml): the request's route (the virtual host's routes in order, the first
whose match holds), then each of the route's `rate_limits` entries makes one descriptor:
its actions run in order, each appending one entry (RateLimit.Action in Envoy's
api/envoy/config/route/v3/route_components.proto and source/common/router/router_ratelimit.cc,
read at commit 0035e40b348445c76ea07ab161cb0503a556577d):
  generic_key         (descriptor_key, or "generic_key"; descriptor_value)
  request_headers     (descriptor_key, the header's first value); header absent: the
                      descriptor is dropped, unless skip_if_absent (the entry is skipped)
  remote_address      ("remote_address", the client's address)
  destination_cluster ("destination_cluster", the route's cluster)
  header_value_match  ("header_match", descriptor_value) when the headers match (or, with
                      expect_match false, do not); else the descriptor is dropped
Any other action fails the test (teach it the rule first). A request with no descriptor is
not sent to the rate limit service. The descriptors go, with the filter's domain, over
gRPC (ShouldRateLimit, stubs generated from service/proto) to sluiced: each sample's limit
(named in the samples, its count read from examples/config/shop.yaml) must answer OK
exactly that many times, then OVER_LIMIT from that limit.

RLQS (envoy-rlqs.yaml): the rate_limit_quota filter's bucket_matchers (the first matcher
whose predicate holds; header inputs, value_match exact/prefix) build each sample's bucket
id (string_value, or custom_value from a request header); the bucket is reported to sluiced
(StreamRateLimitQuotas, service/tests/rlqs_client.py) and its assignment must be the
sample's: a token bucket within the named limit's rate, or ALLOW_ALL for an unlimited one.
A bucket no rule matches gets ALLOW_ALL (--rlqs-unmatched), so a wrong bucket id fails.

The filter's domain, the stated failure_mode_deny and an HTTP/2 cluster named as the filter
says are checked in the YAML itself.

Usage: envoy_example_test.py --sluiced PATH --source-dir DIR [--envoy-dir DIR]"""
import argparse
import os
import sys
import tempfile

import grpc
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_sluiced import LiveSluiced, clear_of_minute_boundary  # noqa: E402
import rls_client  # noqa: E402
import rlqs_client  # noqa: E402

HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3." \
      "HttpConnectionManager"
RLS_FILTER = "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit"
RLQS_FILTER = "type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3." \
              "RateLimitQuotaFilterConfig"
HEADER_INPUT = "type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput"
UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
TAG = str(os.getpid())


class Request:
    def __init__(self, path, headers=None, remote="192.0.2.10"):
        self.path, self.remote = path, remote
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}
        self.headers[":path"] = path

    def __repr__(self):
        shown = {k: v for k, v in self.headers.items() if k != ":path"}
        return "%s %s" % (self.path, shown)


# The traffic: requests as a client sends them, and the limit of shop.yaml each must meet
# (None: unlimited; "no descriptor": Envoy does not ask sluiced).
RLS_SAMPLES = [
    (Request("/sign-in", {"X-Account": "alice-" + TAG}), "sign_in"),
    (Request("/seat-map/42", {"X-Session": "s-" + TAG}), "seat_map"),
    (Request("/checkout", {"X-Account": "bob-" + TAG}), "checkout"),
    (Request("/search?q=tea", {"X-Tenant": "acme-" + TAG}), "per_tenant"),
    (Request("/partner/orders", {"X-Api-Key": "beta-" + TAG}), None),
    (Request("/sign-in"), "no descriptor"),
    (Request("/", {"X-Account": "carol"}), "no descriptor"),
]
RLQS_SAMPLES = [
    (Request("/seat-map/7", {"X-Session": "q-" + TAG}), "seat_map"),
    (Request("/search", {"X-Tenant": "zed"}), "search_global"),
    (Request("/partner", {"X-Api-Key": "beta-" + TAG}), None),
    (Request("/partner", {"X-Api-Key": "k-" + TAG}), "api_key"),
    (Request("/sign-in", {"X-Account": "alice"}), "no bucket"),
]


def load(path):
    with open(path) as f:
        return yaml.safe_load(f)


def hcm_of(bootstrap):
    found = [f["typed_config"] for l in bootstrap["static_resources"]["listeners"]
             for chain in l["filter_chains"] for f in chain["filters"]
             if f.get("typed_config", {}).get("@type") == HCM]
    assert len(found) == 1, "expected one HTTP connection manager, found %d" % len(found)
    return found[0]


def http_filter(hcm, type_url):
    found = [f["typed_config"] for f in hcm["http_filters"]
             if f.get("typed_config", {}).get("@type") == type_url]
    assert len(found) == 1, "expected one %s filter, found %d" % (type_url, len(found))
    assert hcm["http_filters"][-1]["name"] == "envoy.filters.http.router", \
        "the router must be the last HTTP filter"
    return found[0]


def check_cluster(bootstrap, name):
    """The cluster exists and speaks HTTP/2 to its upstream, as gRPC needs."""
    clusters = {c["name"]: c for c in bootstrap["static_resources"]["clusters"]}
    assert name in clusters, "the filter names cluster %s, which is not defined" % name
    opts = clusters[name].get("typed_extension_protocol_options", {}).get(
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions", {})
    assert "http2_protocol_options" in opts.get("explicit_http_config", {}), \
        "cluster %s does not speak HTTP/2 (explicit_http_config.http2_protocol_options)" % name


def grpc_cluster(service):
    return service["envoy_grpc"]["cluster_name"]


# --- RLS: Envoy's route matching and rate limit actions ----------------------------------

def route_for(hcm, request):
    for vhost in hcm["route_config"]["virtual_hosts"]:
        assert vhost["domains"] == ["*"], "only the '*' virtual host is modelled"
        for route in vhost["routes"]:
            match = route["match"]
            path = request.path.split("?", 1)[0]
            if "prefix" in match:
                hit = path.startswith(match["prefix"])
            elif "path" in match:
                hit = path == match["path"]
            else:
                raise NotImplementedError("route match %s: teach this test its rule" % match)
            if hit:
                return route
    return None


def headers_match(matchers, request):
    for m in matchers:
        value = request.headers.get(m["name"].lower())
        if "present_match" in m:
            ok = (value is not None) == m["present_match"]
        elif "exact_match" in m:
            ok = value == m["exact_match"]
        elif "prefix_match" in m:
            ok = value is not None and value.startswith(m["prefix_match"])
        elif "string_match" in m and set(m["string_match"]) <= {"exact", "prefix"}:
            sm = m["string_match"]
            ok = value is not None and (value == sm["exact"] if "exact" in sm
                                        else value.startswith(sm["prefix"]))
        else:
            raise NotImplementedError("header matcher %s: teach this test its rule" % m)
        if m.get("invert_match"):
            ok = not ok
        if not ok:
            return False
    return True


def descriptor_of(rate_limit, route, request):
    """One rate_limits entry's descriptor for the request: a list of (key, value), or None
    when an action cannot append its entry (no descriptor is made)."""
    entries = []
    for action in rate_limit["actions"]:
        (kind, spec), = action.items()
        if kind == "generic_key":
            entries.append((spec.get("descriptor_key") or "generic_key", spec["descriptor_value"]))
        elif kind == "request_headers":
            value = request.headers.get(spec["header_name"].lower())
            if value is None:
                if spec.get("skip_if_absent"):
                    continue
                return None
            entries.append((spec["descriptor_key"], value))
        elif kind == "remote_address":
            entries.append(("remote_address", request.remote))
        elif kind == "destination_cluster":
            entries.append(("destination_cluster", route["route"]["cluster"]))
        elif kind == "header_value_match":
            if headers_match(spec["headers"], request) != spec.get("expect_match", True):
                return None
            entries.append(("header_match", spec["descriptor_value"]))
        else:
            raise NotImplementedError("rate limit action %s: teach this test Envoy's rule" % kind)
    return entries


def descriptors_for(hcm, request):
    route = route_for(hcm, request)
    if route is None or "route" not in route:
        return []
    out = []
    for rate_limit in route["route"].get("rate_limits", []):
        assert rate_limit.get("stage", 0) == 0, "only stage 0 is modelled"
        d = descriptor_of(rate_limit, route, request)
        if d is not None:
            out.append(d)
    return out


# --- shop.yaml: a limit's count by name --------------------------------------------------

def limits_by_name(config):
    found = {}

    def walk(nodes):
        for n in nodes or []:
            rl = n.get("rate_limit")
            if rl and not rl.get("unlimited"):
                name = rl.get("name") or n["key"]
                found[name] = rl
            walk(n.get("descriptors"))
    walk(config["descriptors"])
    return found


def run_rls(bootstrap, shop, grpc_port, proto_dir):
    hcm = hcm_of(bootstrap)
    flt = http_filter(hcm, RLS_FILTER)
    assert flt["domain"] == shop["domain"], (flt["domain"], shop["domain"])
    assert "failure_mode_deny" in flt, "the example must state failure_mode_deny"
    assert flt["rate_limit_service"]["transport_api_version"] == "V3"
    check_cluster(bootstrap, grpc_cluster(flt["rate_limit_service"]["grpc_service"]))
    with tempfile.TemporaryDirectory() as out_dir:
        rls_client.compile_protos(proto_dir, out_dir)
        from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
        from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
        channel = grpc.insecure_channel("127.0.0.1:%d" % grpc_port)
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)
        limits = limits_by_name(shop)
        ok, over = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT

        def ask(descriptors):
            req = rls_pb2.RateLimitRequest(domain=flt["domain"], descriptors=[
                ratelimit_pb2.RateLimitDescriptor(entries=[
                    ratelimit_pb2.RateLimitDescriptor.Entry(key=k.encode(), value=v.encode())
                    for k, v in d]) for d in descriptors])
            return stub.ShouldRateLimit(req, timeout=5)

        for request, expected in RLS_SAMPLES:
            descriptors = descriptors_for(hcm, request)
            print("%-45s -> %s" % (request, descriptors or "no descriptor: not sent"))
            if expected == "no descriptor":
                assert descriptors == [], "%s: expected no descriptor" % request
                continue
            assert descriptors, "%s: the example makes no descriptor" % request
            if expected is None:  # unlimited
                for _ in range(20):
                    r = ask(descriptors)
                    assert r.overall_code == ok, "%s: refused: %s" % (request, r)
                print("    20 x OK (unlimited)")
                continue
            count = limits[expected]["requests_per_unit"]
            clear_of_minute_boundary(margin_s=3)  # shop.yaml's windows: the calls take ms
            for i in range(count):
                r = ask(descriptors)
                assert r.overall_code == ok, "%s: call %d of %d refused: %s" % (
                    request, i + 1, count, r)
            r = ask(descriptors)
            assert r.overall_code == over, "%s: call %d not refused: %s" % (request, count + 1, r)
            refusing = [s.current_limit for s in r.statuses if s.code == over]
            assert [(l.name, l.requests_per_unit) for l in refusing] == [(expected, count)], \
                "%s: refused by %s, expected %s (%d)" % (request, refusing, expected, count)
            print("    %d x OK, then OVER_LIMIT by %s" % (count, expected))
        channel.close()


# --- RLQS: the bucket matchers ------------------------------------------------------------

def header_input(typed_config, request):
    assert typed_config["@type"] == HEADER_INPUT, \
        "input %s: teach this test its rule" % typed_config["@type"]
    return request.headers.get(typed_config["header_name"].lower())


def bucket_for(flt, request):
    for m in flt["bucket_matchers"]["matcher_list"]["matchers"]:
        p = m["predicate"]
        assert set(p) == {"single_predicate"}, "predicate %s: teach this test its rule" % p
        sp = p["single_predicate"]
        value = header_input(sp["input"]["typed_config"], request)
        vm = sp["value_match"]
        if "prefix" in vm:
            hit = value is not None and value.startswith(vm["prefix"])
        elif "exact" in vm:
            hit = value == vm["exact"]
        else:
            raise NotImplementedError("value_match %s: teach this test its rule" % vm)
        if not hit:
            continue
        builder = m["on_match"]["action"]["typed_config"]["bucket_id_builder"]["bucket_id_builder"]
        bucket = {}
        for key, vb in builder.items():
            if "string_value" in vb:
                bucket[key] = vb["string_value"]
            else:
                bucket[key] = header_input(vb["custom_value"]["typed_config"], request)
                assert bucket[key] is not None, "%s: header for %s absent" % (request, key)
        return bucket
    return None


def run_rlqs(bootstrap, shop, grpc_port):
    hcm = hcm_of(bootstrap)
    flt = http_filter(hcm, RLQS_FILTER)
    assert flt["domain"] == shop["domain"], (flt["domain"], shop["domain"])
    check_cluster(bootstrap, grpc_cluster(flt["rlqs_server"]))
    limits = limits_by_name(shop)
    channel = grpc.insecure_channel("127.0.0.1:%d" % grpc_port)
    stream = rlqs_client.Stream(channel)
    try:
        samples = list(RLQS_SAMPLES)
        # A control: a bucket no rule matches must not pass for a matched one.
        samples.append((None, "unmatched"))
        for request, expected in samples:
            bucket = bucket_for(flt, request) if request else {"account": "x", "route": "sign_in"}
            print("%-45s -> %s" % (request or "(control) unmatched bucket", bucket))
            if expected == "no bucket":
                assert bucket is None, "%s: expected no bucket" % request
                continue
            assert bucket, "%s: the example makes no bucket" % request
            action = stream.exchange([bucket], 1, 0, 0, domain=flt["domain"]).bucket_action[0]
            assert dict(action.bucket_id.bucket) == bucket, action
            strategy = action.quota_assignment_action.rate_limit_strategy
            kind = strategy.WhichOneof("strategy")
            if expected in (None, "unmatched"):
                assert kind == "blanket_rule" and strategy.blanket_rule == 0, \
                    "%s: expected ALLOW_ALL, got %s" % (bucket, strategy)
                print("    ALLOW_ALL")
                continue
            assert kind == "token_bucket", "%s: expected a token bucket of %s, got %s" % (
                bucket, expected, strategy)
            rl = limits[expected]
            per_second = rl["requests_per_unit"] / UNIT_SECONDS[rl["unit"]]
            tb = strategy.token_bucket
            granted = tb.tokens_per_fill.value / max(1, tb.fill_interval.seconds)
            assert 0 < granted <= per_second + 1e-9, "%s: %s/s granted, the limit is %s/s" % (
                bucket, granted, per_second)
            assert tb.max_tokens <= rl["requests_per_unit"], (bucket, tb)
            print("    token bucket: %d per %d s, %d max (%s: %s/%s)" % (
                tb.tokens_per_fill.value, tb.fill_interval.seconds, tb.max_tokens, expected,
                rl["requests_per_unit"], rl["unit"]))
    finally:
        stream.close()
        channel.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluiced", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--envoy-dir", help="default: SOURCE_DIR/examples/envoy")
    args = ap.parse_args()
    envoy_dir = args.envoy_dir or os.path.join(args.source_dir, "examples", "envoy")
    config_dir = os.path.join(args.source_dir, "examples", "config")
    shop = load(os.path.join(config_dir, "shop.yaml"))
    with LiveSluiced(args.sluiced, config_dir) as s:
        try:
            print("== RLS: examples/envoy/envoy-rls.yaml")
            run_rls(load(os.path.join(envoy_dir, "envoy-rls.yaml")), shop, s.grpc,
                    os.path.join(args.source_dir, "service", "proto"))
            print("== RLQS: examples/envoy/envoy-rlqs.yaml")
            run_rlqs(load(os.path.join(envoy_dir, "envoy-rlqs.yaml")), shop, s.grpc)
        except AssertionError:
            print("sluiced's log (tail):\n" + s.log(), file=sys.stderr)
            raise
    print("PASS")


if __name__ == "__main__":
    main()
