#!/usr/bin/python3
"""docs/openapi.yaml against the live server: a built sluiced on a private redis-server
(free loopback ports) is called for every operation the description has, its error answers
included (400, 401, 404, 405, 410, 413, 429, 503, 202 with Redis stopped), and each real
answer is validated against the description: the status must be one it lists for that
operation, the body must match its schema (JSON Schema 2020-12, Debian's python3-jsonschema),
the headers it lists must be there and match, and none of the headers a client acts on
(Retry-After, RateLimit, RateLimit-Policy, Location, WWW-Authenticate) may come unlisted.

So that the description cannot drift from the server:
- every (path, method, status) the description lists must have been answered once;
- every path literal in service/routes.cc must be a described path (or part of one);
- on each listener, a path not described answers 404, and a method not described at a
  described path 405 (the admin listener: 404), each with the error body.

Usage: openapi_test.py --sluiced PATH --source-dir DIR [--spec FILE]. Exit 0 when every
check passed."""
import argparse
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import jsonschema
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_sluiced import LiveSluiced, clear_of_minute_boundary, request  # noqa: E402

ADMIN_TOKEN = "openapi-test-admin"
METRICS_TOKEN = "openapi-test-metrics"
# The headers a client acts on: sent only where the description lists them.
NOTABLE_HEADERS = {"retry-after", "ratelimit", "ratelimit-policy", "location", "www-authenticate"}
METHODS = ["get", "post", "put", "delete", "patch"]

CONFIG = """\
domain: api
descriptors:
  - key: route
    value: closed
    descriptors:
      - key: account
        failure_mode: closed
        rate_limit: {name: per_account, unit: minute, requests_per_unit: 2}
  - key: route
    value: bucket
    algorithm: token_bucket
    burst: 4
    rate_limit: {name: bucket, unit: second, requests_per_unit: 2}
  - key: streams
    descriptors:
      - key: account
        algorithm: concurrency
        lease_ttl: 30s
        failure_mode: closed
        rate_limit: {name: streams, requests_per_unit: 1}
"""


class Spec:
    def __init__(self, path):
        with open(path) as f:
            self.doc = yaml.safe_load(f)
        assert self.doc["openapi"].startswith("3.1"), "not OpenAPI 3.1"
        self.resolver = jsonschema.RefResolver("", self.doc)
        self.templates = {}  # path template -> regex
        for p in self.doc["paths"]:
            rx = "^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(p)) + "$"
            self.templates[p] = re.compile(rx)
        self.seen = set()
        self.well_formed()

    def well_formed(self):
        """Every $ref resolves and every schema is valid JSON Schema 2020-12 (no OpenAPI
        meta-schema is packaged for Debian: this is the part a JSON Schema library checks)."""
        def walk(node, where):
            if isinstance(node, dict):
                if "$ref" in node:
                    try:
                        self.resolver.resolve(node["$ref"])
                    except jsonschema.RefResolutionError as e:
                        raise AssertionError("%s: %s" % (where, e))
                if "schema" in node and isinstance(node["schema"], dict):
                    jsonschema.Draft202012Validator.check_schema(node["schema"])
                for k, v in node.items():
                    walk(v, where + "/" + str(k))
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    walk(v, "%s/%d" % (where, i))
        walk(self.doc, "#")
        for name, schema in self.doc["components"]["schemas"].items():
            jsonschema.Draft202012Validator.check_schema(schema)

    def deref(self, node):
        while isinstance(node, dict) and "$ref" in node:
            _, node = self.resolver.resolve(node["$ref"])
        return node

    def listener_of(self, template):
        servers = self.doc["paths"][template].get("servers", self.doc["servers"])
        return servers[0]["url"].rsplit(":", 1)[1]  # the default port names the listener

    def template_for(self, path):
        path = path.split("?", 1)[0]
        # A literal path wins over a template ("/v1/leases/x/heartbeat" is not a lease).
        matches = [t for t, rx in self.templates.items() if rx.match(path)]
        matches.sort(key=lambda t: t.count("{"))
        return matches[0] if matches else None

    def validate(self, schema, value, what):
        try:
            jsonschema.Draft202012Validator(schema, resolver=self.resolver).validate(value)
        except jsonschema.ValidationError as e:
            raise AssertionError("%s: %s at %s" % (what, e.message, list(e.absolute_path)))

    def check(self, what, template, method, status, headers, body, response=None):
        """Validates one answer: against the operation's response for `status`, or, for an
        answer to no described operation, against components/responses/`response`."""
        if response:
            described = self.deref(self.doc["components"]["responses"][response])
        else:
            op = self.doc["paths"][template].get(method)
            assert op, "%s: %s %s is not described" % (what, method.upper(), template)
            responses = op["responses"]
            assert str(status) in responses, "%s: %s %s answered %d, which is not described " \
                "(described: %s)" % (what, method.upper(), template, status, sorted(responses))
            described = self.deref(responses[str(status)])
            self.seen.add((template, method, str(status)))
        listed = {k.lower(): self.deref(v) for k, v in described.get("headers", {}).items()}
        for name, h in listed.items():
            if name not in headers:
                assert not h.get("required"), "%s: header %s missing" % (what, name)
                continue
            self.validate(h["schema"], headers[name][0], "%s: header %s" % (what, name))
        for name in NOTABLE_HEADERS & set(headers):
            assert name in listed, "%s: sent %s: %s, which the description does not list " \
                "for %d" % (what, name, headers[name][0], status)
        assert headers.get("server") == ["sluiced"], "%s: Server %s" % (what, headers.get("server"))
        content = described.get("content")
        if not content:
            assert body == b"", "%s: a body where none is described: %r" % (what, body[:200])
            return None
        ctype = headers.get("content-type", [""])[0]
        assert ctype in content, "%s: Content-Type %s, described %s" % (what, ctype, list(content))
        if ctype.startswith("application/json"):
            value = json.loads(body)
            self.validate(content[ctype]["schema"], value, what)
            return value
        self.validate(content[ctype]["schema"], body.decode(), what)
        return body.decode()


class Client:
    def __init__(self, spec, sluiced):
        self.spec, self.s = spec, sluiced
        self.ports = {"8080": sluiced.http, "8082": sluiced.admin, "8083": sluiced.metrics}

    def call(self, what, method, path, body=None, expect=None, token=None, raw=None,
             query="", headers=None):
        """Calls a described operation and validates the answer; returns (status, headers,
        parsed body)."""
        template = self.spec.template_for(path)
        assert template, "%s: %s is not a described path" % (what, path)
        port = self.ports[self.spec.listener_of(template)]
        headers = dict(headers or {})
        if token:
            headers["Authorization"] = "Bearer " + token
        status, got, data = request(port, method.upper(), path + query,
                                    raw if raw is not None else body, headers)
        if expect is not None:
            assert status == expect, "%s: %s %s answered %d, expected %d: %r" % (
                what, method.upper(), path, status, expect, data[:300])
        parsed = self.spec.check(what, template, method.lower(), status, got, data)
        print("ok  %-48s %s %s -> %d" % (what, method.upper(), path + query, status), flush=True)
        return status, got, parsed

    def off_spec(self, what, port, method, path, expect, response, token=None):
        headers = {"Authorization": "Bearer " + token} if token else {}
        status, got, data = request(port, method, path, b"{}" if method != "GET" else None,
                                    headers)
        assert status == expect, "%s: %s %s answered %d, expected %d: %r" % (
            what, method, path, status, expect, data[:300])
        self.spec.check(what, None, None, status, got, data, response=response)
        print("ok  %-48s %s %s -> %d (not described: %s)" % (what, method, path, status,
                                                            response), flush=True)


def descriptor(route, account=None):
    entries = [{"key": "route", "value": route}]
    if account:
        entries.append({"key": "account", "value": account})
    return {"domain": "api", "descriptors": [{"entries": entries}]}


def lease_body(account):
    return {"domain": "api", "entries": [{"key": "streams"}, {"key": "account", "value": account}]}


def console(c):
    """The support console's own calls (the browser test, Console.Browser, drives the page)."""
    signin = "/console/api/signin"
    c.call("console sign-in without a name", "post", signin, {"token": ADMIN_TOKEN}, 400)
    c.call("console sign-in, wrong token", "post", signin, {"token": "x", "actor": "a"}, 401)
    _, h, _ = c.call("console sign-in while closed", "post", signin,
                     {"token": ADMIN_TOKEN, "actor": "a"}, 429)
    time.sleep(int(h["retry-after"][0]))
    _, h, b = c.call("console sign-in", "post", signin, {"token": ADMIN_TOKEN, "actor": "ann"},
                     200)
    cookie = h["set-cookie"][0].split(";")[0]
    for attribute in ("HttpOnly", "SameSite=Strict", "Path=/console/"):
        assert attribute in h["set-cookie"][0], h["set-cookie"]
    signed_in = {"Cookie": cookie}
    with_csrf = {"Cookie": cookie, "X-CSRF-Token": b["csrf"]}
    c.call("console session, signed out", "get", "/console/api/session", expect=401)
    c.call("console session", "get", "/console/api/session", expect=200, headers=signed_in)
    c.call("console top", "get", "/console/api/top", expect=200, headers=signed_in)
    c.call("console top, signed out", "get", "/console/api/top", expect=401)
    c.call("console audit", "get", "/console/api/audit", expect=200, headers=signed_in,
           query="?actor=ann&limit=5")
    c.call("console audit, signed out", "get", "/console/api/audit", expect=401)
    c.call("console peek", "post", "/console/api/peek", descriptor("closed", "p"), 200,
           headers=with_csrf)
    c.call("console peek, bad body", "post", "/console/api/peek", {"domain": "api"}, 400,
           headers=with_csrf)
    c.call("console peek, no CSRF token", "post", "/console/api/peek", descriptor("closed", "p"),
           403, headers=signed_in)
    c.call("console peek, signed out", "post", "/console/api/peek", descriptor("closed", "p"),
           401)
    c.call("console sign-out, no CSRF token", "post", "/console/api/signout", {}, 403,
           headers=signed_in)
    c.call("console sign-out", "post", "/console/api/signout", {}, 200, headers=with_csrf)
    c.call("console sign-out, signed out", "post", "/console/api/signout", {}, 401,
           headers=with_csrf)


def with_redis(c):
    # Checks: admitted twice, then refused; the RateLimit headers of both.
    clear_of_minute_boundary()
    for i in range(2):
        _, h, b = c.call("check #%d" % (i + 1), "post", "/v1/check", descriptor("closed", "a"), 200)
        assert b["allowed"] and h["ratelimit-policy"] == ['"per_account";q=2;w=60'], h
    _, h, b = c.call("check over the limit", "post", "/v1/check", descriptor("closed", "a"), 429)
    assert not b["allowed"] and b["descriptors"][0]["reason"] == "over_limit", b
    assert "retry-after" in h and h["ratelimit"][0].startswith('"per_account";r=0;'), h
    _, h, _ = c.call("check a token bucket", "post", "/v1/check", descriptor("bucket"), 200)
    assert h["ratelimit-policy"] == ['"bucket";q=4;w=2'], h
    c.call("check a peek (hits 0)", "post", "/v1/check", dict(descriptor("closed", "b"), hits=0),
           200)
    _, _, b = c.call("check matching no limit", "post", "/v1/check", descriptor("none"), 200)
    assert b["descriptors"][0]["limit"] is None, b
    c.call("check malformed JSON", "post", "/v1/check", raw=b"{nope", expect=400)
    c.call("check an unknown domain", "post", "/v1/check",
           dict(descriptor("closed", "a"), domain="elsewhere"), 400)
    c.call("check body over 64 KiB", "post", "/v1/check", raw=b" " * (65 * 1024), expect=413)

    # Debits: charged whether they fit or not, into a debt of at most the limit (2 here).
    clear_of_minute_boundary()
    _, h, b = c.call("debit over the limit", "post", "/v1/debit",
                     dict(descriptor("closed", "d"), hits=5), 200)
    assert b["descriptors"][0]["debt"] == 2 and not b["allowed"] and "retry-after" in h, b
    _, _, b = c.call("debit of a token bucket", "post", "/v1/debit",
                     dict(descriptor("bucket"), hits=9), 200)
    assert b["descriptors"][0]["debt"] == 4, b  # at most the burst: one bucket below zero
    c.call("debit of a concurrency limit", "post", "/v1/debit",
           {"domain": "api", "descriptors": [{"entries": lease_body("d")["entries"]}]}, 400)

    # Reservations: held all or nothing, settled once, on the per-account limit (2 a minute).
    clear_of_minute_boundary()
    _, h, b = c.call("reserve", "post", "/v1/reservations", dict(descriptor("closed", "r"), hits=2),
                     200)
    handle = b["handle"]
    assert h["location"] == ["/v1/reservations/" + handle], h
    c.call("reserve over the limit", "post", "/v1/reservations", descriptor("closed", "r"), 429)
    c.call("reserve on a concurrency limit", "post", "/v1/reservations",
           {"domain": "api", "descriptors": [{"entries": lease_body("r")["entries"]}]}, 400)
    _, _, b = c.call("settle", "post", "/v1/reservations/%s/settle" % handle, {"hits": 1}, 200)
    assert b["outcome"] == "settled" and b["descriptors"][0]["remaining"] == 1, b
    _, _, b = c.call("settle again", "post", "/v1/reservations/%s/settle" % handle, {"hits": 0},
                     409)
    assert b["outcome"] == "already_settled" and b["settled_hits"] == 1, b
    c.call("settle without hits", "post", "/v1/reservations/%s/settle" % handle, {}, 400)
    c.call("settle of garbage", "post", "/v1/reservations/nothing/settle", {"hits": 0}, 404)
    c.call("settle a forged token", "post", "/v1/reservations/%s/settle" % forge(handle),
           {"hits": 0}, 410)

    envoy = {"domain": "api", "descriptors": [{"entries": [
        {"key": "route", "value": "closed"}, {"key": "account", "value": "j"}]}]}
    for i in range(2):
        c.call("/json #%d" % (i + 1), "post", "/json", envoy, 200)
    _, _, b = c.call("/json over the limit", "post", "/json", envoy, 429)
    assert b["overallCode"] == "OVER_LIMIT", b
    c.call("/json missing descriptors", "post", "/json", {"domain": "api"}, 400)

    # Leases: one slot per account.
    _, h, grant = c.call("acquire", "post", "/v1/leases", lease_body("l1"), 201)
    lease = grant["lease"]
    assert h["location"] == ["/v1/leases/" + lease] and len(lease) <= 440, h
    c.call("acquire at the cap", "post", "/v1/leases", lease_body("l1"), 429)
    c.call("acquire of a rate limit", "post", "/v1/leases",
           {"domain": "api", "entries": [{"key": "route", "value": "closed"}]}, 400)
    _, _, b = c.call("heartbeat", "post", "/v1/leases/%s/heartbeat" % lease, expect=200)
    assert b["expires_in_ms"] > 25000, b
    c.call("heartbeat of garbage", "post", "/v1/leases/not-a-lease/heartbeat", expect=404)
    c.call("admin list without a token", "post", "/admin/leases/list", lease_body("l1"), 401)
    c.call("admin list with a wrong token", "post", "/admin/leases/list", lease_body("l1"), 401,
           token="wrong")
    _, _, b = c.call("admin list", "post", "/admin/leases/list", lease_body("l1"), 200,
                     token=ADMIN_TOKEN)
    assert len(b["leases"]) == 1, b
    c.call("release", "delete", "/v1/leases/" + lease, expect=204)
    c.call("release again", "delete", "/v1/leases/" + lease, expect=204)
    c.call("heartbeat after release", "post", "/v1/leases/%s/heartbeat" % lease, expect=410)
    c.call("release of garbage", "delete", "/v1/leases/not-a-lease", expect=404)

    # Health.
    c.call("healthz", "get", "/healthz", expect=200)
    _, _, b = c.call("readyz", "get", "/readyz", expect=200)
    assert b["status"] == "ready", b
    c.call("readyz strict", "get", "/readyz", expect=200, query="?strict")
    c.call("readyz strict=maybe", "get", "/readyz", expect=400, query="?strict=maybe")

    # Admin.
    c.call("admin config", "get", "/admin/config", expect=200, token=ADMIN_TOKEN)
    c.call("admin config without a token", "get", "/admin/config", expect=401)
    c.call("admin breaker", "get", "/admin/breaker", expect=200, token=ADMIN_TOKEN)
    c.call("admin breaker without a token", "get", "/admin/breaker", expect=401)
    _, _, b = c.call("admin inspect", "post", "/admin/inspect", descriptor_request("closed", "a"),
                     200, token=ADMIN_TOKEN)
    assert b["keys"], b
    c.call("admin inspect without a token", "post", "/admin/inspect",
           descriptor_request("closed", "a"), 401)
    c.call("admin inspect malformed", "post", "/admin/inspect", raw=b"[]", expect=400,
           token=ADMIN_TOKEN)
    c.call("admin inspect matching no limit", "post", "/admin/inspect",
           descriptor_request("none"), 404, token=ADMIN_TOKEN)
    c.call("admin list of a rate limit", "post", "/admin/leases/list",
           descriptor_request("closed", "a"), 400, token=ADMIN_TOKEN)
    c.call("admin list of an unknown domain", "post", "/admin/leases/list",
           dict(lease_body("l1"), domain="elsewhere"), 404, token=ADMIN_TOKEN)
    c.call("acquire for the admin release", "post", "/v1/leases", lease_body("l2"), 201)
    release = dict(lease_body("l2"), actor="openapi-test", reason="checking the description")
    _, _, b = c.call("admin release", "post", "/admin/leases/release", release, 200,
                     token=ADMIN_TOKEN)
    assert b["released"] == 1, b
    c.call("admin release without a reason", "post", "/admin/leases/release", lease_body("l2"),
           400, token=ADMIN_TOKEN)
    c.call("admin release without a token", "post", "/admin/leases/release", release, 401)
    c.call("admin release of an unknown domain", "post", "/admin/leases/release",
           dict(release, domain="elsewhere"), 404, token=ADMIN_TOKEN)
    reset = dict(descriptor_request("closed", "a"), actor="openapi-test", reason="locked out")
    _, _, b = c.call("admin reset", "post", "/admin/reset", reset, 200, token=ADMIN_TOKEN)
    assert b["remaining"] == 2 and b["record"]["outcome"] == "done", b
    c.call("check after the admin reset", "post", "/v1/check", descriptor("closed", "a"), 200)
    c.call("admin reset without a reason", "post", "/admin/reset", descriptor_request("closed", "a"),
           400, token=ADMIN_TOKEN)
    c.call("admin reset without a token", "post", "/admin/reset", reset, 401)
    c.call("admin reset of a concurrency limit", "post", "/admin/reset", release, 400,
           token=ADMIN_TOKEN)
    c.call("admin reset matching no limit", "post", "/admin/reset",
           dict(descriptor_request("none"), actor="openapi-test", reason="x"), 404,
           token=ADMIN_TOKEN)

    overrides(c)

    # Metrics (this sluiced runs with --metrics-token).
    _, _, page = c.call("metrics", "get", "/metrics", expect=200, token=METRICS_TOKEN)
    assert "sluiced_decisions_total" in page
    c.call("metrics without a token", "get", "/metrics", expect=401)


def unwritable_audit_log(c, s):
    """A directory where the audit log should be: the record cannot be written, so the
    actions are refused (500) before the store is touched; then the log is given back."""
    path = os.path.join(s.workdir, "audit.log")
    kept = path + ".kept"
    os.rename(path, kept)
    os.mkdir(path)
    try:
        c.call("acquire for the unaudited release", "post", "/v1/leases", lease_body("l5"), 201)
        release = dict(lease_body("l5"), actor="openapi-test", reason="no audit log")
        _, _, b = c.call("admin release, audit log unwritable", "post", "/admin/leases/release",
                         release, 500, token=ADMIN_TOKEN)
        assert "audit" in b["error"], b
        reset = dict(descriptor_request("closed", "a"), actor="openapi-test", reason="no log")
        c.call("admin reset, audit log unwritable", "post", "/admin/reset", reset, 500,
               token=ADMIN_TOKEN)
    finally:
        os.rmdir(path)
        os.rename(kept, path)
def forge(handle):
    """The same reservation handle with another token: the first limit's reference starts
    with its 22-character token, after version, count, name size, name and reference size."""
    import base64
    raw = bytearray(base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4)))
    at = 3 + raw[2] + 2  # the first token character
    raw[at] = ord("B") if raw[at] == ord("A") else ord("A")
    return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
def overrides(c):
    """Runtime overrides: set (a check then says so), listed, refused, cleared; 409 when the
    limit has 1,000 in force (filled in Redis directly: 1,000 audited calls would be slow)."""
    target = dict(descriptor_request("closed", "o"), actor="openapi-test", reason="a tenant's plan")
    _, _, b = c.call("admin set override", "post", "/admin/overrides",
                     dict(target, limit=5, ttl_s=60), 200, token=ADMIN_TOKEN)
    assert b["override"]["limit"] == 5 and b["record"]["old"] == "limiter", b
    _, _, b = c.call("check under a runtime override", "post", "/v1/check",
                     descriptor("closed", "o"), 200)
    assert b["descriptors"][0]["override"] == "runtime", b
    _, _, b = c.call("admin list overrides", "get", "/admin/overrides", expect=200,
                     token=ADMIN_TOKEN)
    assert len(b["overrides"]) == 1, b
    limiter = b["overrides"][0]["limiter"]
    c.call("admin list overrides without a token", "get", "/admin/overrides", expect=401)
    c.call("admin set override, ttl over 30 days", "post", "/admin/overrides",
           dict(target, limit=5, ttl_s=31 * 86400), 400, token=ADMIN_TOKEN)
    c.call("admin set override without a token", "post", "/admin/overrides",
           dict(target, limit=5, ttl_s=60), 401)
    c.call("admin set override matching no limit", "post", "/admin/overrides",
           dict(descriptor_request("none"), actor="x", reason="y", limit=1, ttl_s=60), 404,
           token=ADMIN_TOKEN)
    fill = ("local now = redis.call('TIME')[1] * 1000 "
            "for i = 1, 1000 do redis.call('HSET', KEYS[1], 'filler' .. i, "
            "'1 0 ' .. (now + 3600000) .. ' ' .. now .. ' 1 xy') end "
            "redis.call('HSET', KEYS[1], '', now) redis.call('PEXPIRE', KEYS[1], 3600000)")
    subprocess.run(["redis-cli", "-p", str(c.s.redis_port), "EVAL", fill, "1",
                    "sluice:{overrides}:" + limiter], check=True, stdout=subprocess.DEVNULL)
    c.call("admin set override, 1,000 in force", "post", "/admin/overrides",
           dict(descriptor_request("closed", "p"), actor="x", reason="y", limit=1, ttl_s=60), 409,
           token=ADMIN_TOKEN)
    _, _, b = c.call("admin clear override", "post", "/admin/overrides/clear", target, 200,
                     token=ADMIN_TOKEN)
    assert b["cleared"] is True, b
    subprocess.run(["redis-cli", "-p", str(c.s.redis_port), "DEL",
                    "sluice:{overrides}:" + limiter], check=True, stdout=subprocess.DEVNULL)
    c.call("admin clear override without a reason", "post", "/admin/overrides/clear",
           descriptor_request("closed", "o"), 400, token=ADMIN_TOKEN)
    c.call("admin clear override without a token", "post", "/admin/overrides/clear", target, 401)
    c.call("admin clear override matching no limit", "post", "/admin/overrides/clear",
           dict(descriptor_request("none"), actor="x", reason="y"), 404, token=ADMIN_TOKEN)


def descriptor_request(route, account=None):
    d = descriptor(route, account)
    return {"domain": d["domain"], "entries": d["descriptors"][0]["entries"]}


def without_redis(c, s):
    _, _, grant = c.call("acquire before Redis stops", "post", "/v1/leases", lease_body("l3"), 201)
    _, _, b = c.call("reserve before Redis stops", "post", "/v1/reservations",
                     descriptor("closed", "t"), 200)
    reserved = b["handle"]
    s.stop_redis()
    _, h, b = c.call("check, closed, Redis stopped", "post", "/v1/check",
                     descriptor("closed", "c"), 503)
    assert b["descriptors"][0]["source"] == "fail_closed", b
    _, _, b = c.call("readyz, Redis stopped", "get", "/readyz", expect=200)
    assert b["status"] == "degraded" and b["answering"] == "failure policies", b
    c.call("readyz strict, Redis stopped", "get", "/readyz", expect=503, query="?strict=1")
    _, _, b = c.call("debit, Redis stopped", "post", "/v1/debit", descriptor("closed", "e"),
                     503)
    assert "error" in b["descriptors"][0], b
    c.call("reserve, Redis stopped", "post", "/v1/reservations", descriptor("closed", "s"), 503)
    c.call("settle, Redis stopped", "post", "/v1/reservations/%s/settle" % reserved, {"hits": 0},
           503)
    c.call("acquire, closed, Redis stopped", "post", "/v1/leases", lease_body("l4"), 503)
    c.call("heartbeat, Redis stopped", "post", "/v1/leases/%s/heartbeat" % grant["lease"],
           expect=503)
    _, _, b = c.call("release, Redis stopped", "delete", "/v1/leases/" + grant["lease"],
                     expect=202)
    assert b["released"] is False, b
    c.call("admin list, Redis stopped", "post", "/admin/leases/list", lease_body("l3"), 503,
           token=ADMIN_TOKEN)
    c.call("admin inspect, Redis stopped", "post", "/admin/inspect",
           descriptor_request("closed", "a"), 503, token=ADMIN_TOKEN)
    release = dict(lease_body("l3"), actor="openapi-test", reason="Redis stopped")
    c.call("admin release, Redis stopped", "post", "/admin/leases/release", release, 503,
           token=ADMIN_TOKEN)
    reset = dict(descriptor_request("closed", "a"), actor="openapi-test", reason="Redis stopped")
    c.call("admin reset, Redis stopped", "post", "/admin/reset", reset, 503, token=ADMIN_TOKEN)
    c.call("admin list overrides, Redis stopped", "get", "/admin/overrides", expect=503,
           token=ADMIN_TOKEN)
    c.call("admin set override, Redis stopped", "post", "/admin/overrides",
           dict(reset, limit=1, ttl_s=60), 503, token=ADMIN_TOKEN)
    c.call("admin clear override, Redis stopped", "post", "/admin/overrides/clear", reset, 503,
           token=ADMIN_TOKEN)
    _, _, b = c.call("admin breaker, Redis stopped", "get", "/admin/breaker", expect=200,
                     token=ADMIN_TOKEN)
    assert b["connected"] is False, b


def draining(spec, s):
    """SIGTERM: /readyz answers 503 draining at once, on a connection kept alive from before
    the signal (new connections are refused); sluiced then exits 0."""
    conn = http.client.HTTPConnection("127.0.0.1", s.http, timeout=5)
    try:
        conn.request("GET", "/healthz")
        conn.getresponse().read()
        s.process.send_signal(signal.SIGTERM)
        time.sleep(0.05)
        conn.request("GET", "/readyz")
        r = conn.getresponse()
        headers = {}
        for k, v in r.getheaders():
            headers.setdefault(k.lower(), []).append(v)
        body = spec.check("readyz while draining", "/readyz", "get", r.status, headers, r.read())
    finally:
        conn.close()
    assert r.status == 503 and body == {"status": "draining", "store": "not asked"}, body
    assert headers.get("connection") == ["close"], headers
    print("ok  %-48s GET /readyz -> 503 %s" % ("readyz while draining", body), flush=True)
    rc = s.process.wait(timeout=15)
    assert rc == 0, "sluiced exited %s on SIGTERM" % rc


def undescribed(c, spec, s):
    """Paths the description does not have answer 404 on every listener, and methods it
    does not have at a described path 405 (404 on the admin listener)."""
    ports = {"8080": s.http, "8082": s.admin, "8083": s.metrics}
    tokens = {"8080": None, "8082": ADMIN_TOKEN, "8083": METRICS_TOKEN}
    for listener, port in ports.items():
        for path in ["/", "/nope", "/v1", "/v1/checks", "/admin", "/metrics/x", "/v2/check"]:
            if spec.template_for(path) and spec.listener_of(spec.template_for(path)) == listener:
                continue
            c.off_spec("unknown path on :%s" % listener, port, "GET", path, 404, "NotFound",
                       tokens[listener])
    c.off_spec("/metrics on the public listener", s.http, "GET", "/metrics", 404, "NotFound")
    c.off_spec("a lease path with two segments", s.http, "DELETE", "/v1/leases/a/b", 404,
               "NotFound")
    c.off_spec("an empty lease", s.http, "DELETE", "/v1/leases/", 404, "NotFound")
    for template, item in spec.doc["paths"].items():
        listener = spec.listener_of(template)
        path = template.replace("{lease}", "not-a-lease")
        for method in METHODS:
            if method in item:
                continue
            if listener == "8082":
                c.off_spec("undescribed method", ports[listener], method.upper(), path, 404,
                           "NotFound", ADMIN_TOKEN)
            else:
                c.off_spec("undescribed method", ports[listener], method.upper(), path, 405,
                           "MethodNotAllowed", tokens[listener])


def routes_in_source(spec, source_dir):
    """Every path literal of service/routes.cc is a described path, or a part of one."""
    with open(os.path.join(source_dir, "service", "routes.cc")) as f:
        literals = set(re.findall(r'"(/[A-Za-z0-9_./-]*)"', f.read()))
    assert literals, "no path literal found in service/routes.cc"
    for lit in sorted(literals):
        ok = lit in spec.doc["paths"] or any(
            t.startswith(lit) or t.endswith(lit) for t in spec.doc["paths"])
        assert ok, "service/routes.cc serves %s, which docs/openapi.yaml does not describe" % lit
    print("ok  every path of service/routes.cc is described: %s" % ", ".join(sorted(literals)))


def coverage(spec):
    missing = []
    for template, item in spec.doc["paths"].items():
        for method in METHODS:
            for status in item.get(method, {}).get("responses", {}):
                if (template, method, status) not in spec.seen:
                    missing.append("%s %s -> %s" % (method.upper(), template, status))
    assert not missing, "described but never answered in this test: " + "; ".join(missing)
    print("ok  every described answer was seen (%d)" % len(spec.seen))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluiced", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--spec", help="default: SOURCE_DIR/docs/openapi.yaml")
    args = ap.parse_args()
    spec = Spec(args.spec or os.path.join(args.source_dir, "docs", "openapi.yaml"))
    routes_in_source(spec, args.source_dir)
    with tempfile.TemporaryDirectory() as config_dir:
        with open(os.path.join(config_dir, "api.yaml"), "w") as f:
            f.write(CONFIG)
        with LiveSluiced(args.sluiced, config_dir, admin_token=ADMIN_TOKEN,
                         extra_args=["--metrics-token", METRICS_TOKEN,
                                     "--default-failure-mode", "open"]) as s:
            c = Client(spec, s)
            try:
                with_redis(c)
                console(c)
                unwritable_audit_log(c, s)
                undescribed(c, spec, s)
                without_redis(c, s)
                draining(spec, s)
            except AssertionError:
                print("sluiced's log (tail):\n" + s.log(), file=sys.stderr)
                raise
    coverage(spec)
    print("PASS")


if __name__ == "__main__":
    main()
