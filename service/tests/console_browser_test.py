"""Console.Browser: the support console in a real browser (headless Chromium over its
DevTools protocol, service/tests/cdp.py) against a live sluiced and redis-server on free
loopback ports, with examples/config:

  sign in; reset a refused sign-in counter and see the next check admitted; find an account
  whose holder keeps heartbeating three leases and see them, and the chart's bar of this
  minute at 3; release them with a reason and see them gone, the holder's next heartbeat
  refused and the audit entry; set a runtime override and see a check use it; a POST
  without the CSRF token refused (403); a wrong token refused (401) and then sign-in closed
  (429); no request of the page to another origin.

A screenshot of each page goes to --artifacts. Without Chromium the test is skipped
(exit 77) saying so.
"""
import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdp import Browser, find_chromium  # noqa: E402
from live_sluiced import LiveSluiced, clear_of_minute_boundary, request  # noqa: E402

TOKEN = "console-test-token"
STREAMS = [{"key": "streams", "value": "video"}, {"key": "account", "value": "42"}]
SIGN_IN = [{"key": "route", "value": "sign_in"}, {"key": "account", "value": "7"}]
LOCKED = [{"key": "route", "value": "sign_in"}, {"key": "account", "value": "8"}]


class Holder:
    """A client holding three leases and heartbeating them every 300 ms until they are
    gone (or stop() is called): what a leaked-looking floor is made of."""

    def __init__(self, port):
        self.port, self.handles, self.gone = port, [], 0
        self._stop = threading.Event()
        for _ in range(3):
            status, _, body = request(port, "POST", "/v1/leases",
                                      {"domain": "shop", "entries": STREAMS})
            assert status == 201, (status, body)
            self.handles.append(json.loads(body)["lease"])
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()

    def _beat(self):
        while not self._stop.wait(0.3) and self.handles:
            for h in list(self.handles):
                status, _, _ = request(self.port, "POST", "/v1/leases/%s/heartbeat" % h, {})
                if status == 410:  # released by an operator: the slot is no longer ours
                    self.handles.remove(h)
                    self.gone += 1

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)


def check(port, entries):
    status, _, body = request(port, "POST", "/v1/check",
                              {"domain": "shop", "descriptors": [{"entries": entries}]})
    return status, json.loads(body)


def js(value):
    return json.dumps(value)


def fill(page, fields):
    for element, value in fields.items():
        page.eval("document.getElementById(%s).value = %s" % (js(element), js(value)))


def submit(page, form):
    page.eval("document.getElementById(%s).requestSubmit()" % js(form))


def confirm(page, expected_words):
    """Waits for the confirmation, checks what it says, confirms."""
    text = page.wait("the confirmation", "document.getElementById('confirm').open && "
                     "document.getElementById('confirm-text').textContent")
    for w in expected_words:
        assert w in text, "the confirmation %r does not say %r" % (text, w)
    page.eval("document.getElementById('confirm-ok').click()")
    return text


def find(page, entries):
    fill(page, {"find-domain": "shop",
                "find-entries": "\n".join("%s=%s" % (e["key"], e["value"]) for e in entries)})
    submit(page, "find-form")
    want = ",".join("%s=%s" % (e["key"], e["value"]) for e in entries)
    page.wait("the account " + want,
              "document.getElementById('account-title').textContent.startsWith(%s)" % js(want))


def limit_row(page, name):
    return page.eval("""(() => { for (const tr of document.querySelectorAll('#limit-table tr'))
        if (tr.cells[0].textContent === %s) return tr.cells[1].textContent; return null; })()"""
                     % js(name))


def sign_in(page, s, shots):
    page.navigate("http://127.0.0.1:%d/console/" % s.admin)
    page.wait("the sign-in form", "!document.getElementById('signin').hidden")
    page.screenshot(os.path.join(shots, "sign_in.png"))
    fill(page, {"signin-actor": "Dana from support", "signin-token": TOKEN})
    submit(page, "signin-form")
    page.wait("the console", "!document.getElementById('app').hidden")
    assert page.eval("document.getElementById('actor').textContent") == "Dana from support"
    # The cookie is not the page's to read (HttpOnly).
    assert "sluice_console" not in page.eval("document.cookie")


def release_leases(page, s, shots, holder):
    find(page, STREAMS)
    page.wait("three live leases, heartbeating",
              "document.querySelectorAll('#lease-table tbody tr').length === 3 && "
              "[...document.querySelectorAll('#lease-table tbody tr')]"
              ".every(tr => tr.cells[3].textContent === 'yes')", timeout_s=10)
    # The chart's bar of this minute: the most live leases, from the store's history.
    page.wait("the id among the most live leases now", "document.getElementById('top-leases')"
              ".textContent.includes('streams=video,account=42 on shop.streams.account: 3 live')")
    page.wait("the chart at 3", "document.getElementById('chart').dataset.latest === '3' && "
              "document.querySelector('#chart rect.bar[data-max=\"3\"]') !== null")
    page.screenshot(os.path.join(shots, "account_leases.png"))
    # The one docs/operating.md shows: the account alone, scaled down.
    page.screenshot(os.path.join(shots, "console.png"), selector="#account", scale=0.7)
    fill(page, {"action-reason": "ticket 1234: stuck streams after the client crash"})
    page.eval("document.getElementById('do-release').click()")
    confirm(page, ["3 live leases", "streams=video,account=42", "will be released"])
    page.wait("the leases gone",
              "document.querySelector('#lease-table tbody tr td').textContent === 'no live lease'")
    page.wait("the audit entry", """[...document.querySelectorAll('#audit-table tbody tr')].some(
        tr => tr.cells[1].textContent === 'Dana from support' &&
              tr.cells[2].textContent === 'release_all' &&
              tr.cells[5].textContent.startsWith('ticket 1234'))""")
    page.wait("the id no longer among the most live leases",
              "!document.getElementById('top-leases').textContent.includes('account=42')")
    page.screenshot(os.path.join(shots, "released.png"))
    deadline = time.monotonic() + 5
    while holder.gone < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert holder.gone == 3, "the holder's heartbeats were not refused after the release"
    status, _, body = request(s.admin, "POST", "/admin/leases/list",
                              {"domain": "shop", "entries": STREAMS},
                              {"Authorization": "Bearer " + TOKEN})
    assert status == 200 and json.loads(body)["leases"] == [], body


def reset_counter(page, s, shots):
    for _ in range(4):
        status, _ = check(s.http, SIGN_IN)
    assert status == 429, "the sign-in counter should refuse its 4th call, got %d" % status
    find(page, SIGN_IN)
    page.wait("refused now", "document.querySelector('#limit-table tr.refused') !== null")
    # Refused once: the console's own look (a check with hits 0) is no refusal.
    page.wait("the id among the most refused now", "document.getElementById('top-refused')"
              ".textContent.includes('route=sign_in,account=7 on shop.route_sign_in.account: "
              "1 refused')")
    assert limit_row(page, "refused now") == "yes"
    assert limit_row(page, "limit") == "3 per minute", limit_row(page, "limit")
    assert limit_row(page, "used") == "3" and limit_row(page, "remaining") == "0"
    page.screenshot(os.path.join(shots, "account_refused.png"))
    fill(page, {"action-reason": "customer verified by phone"})
    page.eval("document.getElementById('do-reset').click()")
    confirm(page, ["sign_in", "route=sign_in,account=7", "will be reset"])
    page.wait("admitted now", "document.querySelector('#limit-table tr.admitted') !== null")
    status, body = check(s.http, SIGN_IN)
    assert status == 200 and body["allowed"], (status, body)


def set_override(page, s, shots):
    for _ in range(4):
        status, _ = check(s.http, LOCKED)
    assert status == 429
    find(page, LOCKED)
    page.wait("the override form", "!document.getElementById('override-part').hidden")
    fill(page, {"action-reason": "acme migration, approved", "override-limit": "50",
                "override-ttl": "600"})
    page.eval("document.getElementById('do-override').click()")
    confirm(page, ["route=sign_in,account=8", "50", "600 s"])
    page.wait("the override listed",
              "document.querySelector('#override-list li') !== null && "
              "document.querySelector('#override-list li').textContent.includes('limit 50')")
    # The account's limit as now in force, once this sluiced's copy has the override.
    deadline = time.monotonic() + 5
    while limit_row(page, "limit") != "50 per minute (runtime override)":
        assert time.monotonic() < deadline, "the limit shown: %r" % limit_row(page, "limit")
        find(page, LOCKED)
        time.sleep(0.2)
    page.screenshot(os.path.join(shots, "override.png"))
    # Every client applies an override within its refresh (a second): a bounded wait.
    deadline = time.monotonic() + 5
    while True:
        status, body = check(s.http, LOCKED)
        if status == 200 and body["descriptors"][0].get("override") == "runtime":
            break
        assert time.monotonic() < deadline, "no check used the override: %d %r" % (status, body)
        time.sleep(0.2)


def csrf_refused(page, s):
    # From the signed-in page itself (its cookie goes along), without the CSRF header.
    status = page.eval("""fetch('/console/api/admin/reset', {method: 'POST',
        headers: {'Content-Type': 'application/json'},
        body: JSON.stringify({domain: 'shop', entries: %s, reason: 'no csrf'})})
        .then(r => r.status)""" % js(SIGN_IN))
    assert status == 403, "a POST without X-CSRF-Token answered %s" % status
    wrong = page.eval("""fetch('/console/api/admin/reset', {method: 'POST',
        headers: {'Content-Type': 'application/json', 'X-CSRF-Token': 'guess'},
        body: JSON.stringify({domain: 'shop', entries: %s, reason: 'bad csrf'})})
        .then(r => r.status)""" % js(SIGN_IN))
    assert wrong == 403, "a POST with a wrong X-CSRF-Token answered %s" % wrong


def headers_and_sign_in_backoff(s):
    status, headers, _ = request(s.admin, "GET", "/console/")
    assert status == 200
    csp = headers["content-security-policy"][0]
    for part in ("default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"):
        assert part in csp, csp
    assert headers["x-content-type-options"] == ["nosniff"]
    assert headers["referrer-policy"] == ["no-referrer"]
    body = {"token": "wrong", "actor": "mallory"}
    status, _, _ = request(s.admin, "POST", "/console/api/signin", body)
    assert status == 401, status
    status, headers, _ = request(s.admin, "POST", "/console/api/signin",
                                 {"token": TOKEN, "actor": "mallory"})
    assert status == 429 and "retry-after" in headers, status


def run(s, shots):
    holder = Holder(s.http)
    try:
        with Browser(shots) as browser:
            page = browser.new_page()
            sign_in(page, s, shots)
            reset_counter(page, s, shots)  # first: its window is a clock minute
            release_leases(page, s, shots, holder)
            set_override(page, s, shots)
            csrf_refused(page, s)
            page.screenshot(os.path.join(shots, "audit.png"))
            origin = "http://127.0.0.1:%d/" % s.admin
            others = [u for u in browser.requests
                      if not u.startswith(origin) and u != "about:blank"]
            assert browser.requests and not others, "requests to other origins: %r" % others
            print("page requests: %d, all to %s" % (len(browser.requests), origin))
    finally:
        holder.stop()
    headers_and_sign_in_backoff(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluiced", required=True)
    ap.add_argument("--source-dir", required=True)
    ap.add_argument("--artifacts", required=True)
    a = ap.parse_args()
    if not find_chromium():
        print("SKIP: no chromium (scripts/setup.sh installs Debian's)")
        return 77
    os.makedirs(a.artifacts, exist_ok=True)
    # The sign-in counter's refusal is seen within seconds of its four checks, in one
    # clock-aligned minute window.
    clear_of_minute_boundary(margin_s=10)
    config = os.path.join(a.source_dir, "examples", "config")
    with LiveSluiced(a.sluiced, config, admin_token=TOKEN) as s:
        try:
            run(s, a.artifacts)
        except Exception:
            print("sluiced's log:\n" + s.log())
            raise
    print("OK: screenshots in " + a.artifacts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
