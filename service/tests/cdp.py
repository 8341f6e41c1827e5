"""A headless Chromium driven over its DevTools protocol on a pipe (--remote-debugging-pipe:
the browser reads commands on fd 3 and writes answers and events on fd 4, each a JSON
message ended by a NUL byte), with the standard library only: no WebSocket, no npm.

    with Browser(work_dir) as b:
        page = b.new_page()
        page.navigate("http://127.0.0.1:8081/console/")
        page.eval("document.title")
        page.screenshot("page.png")
        b.requests   # every URL the pages asked for (Network.requestWillBeSent)

Everything is bounded in time: each command waits at most `timeout_s`; the browser is
stopped by its own pid.
"""
import base64
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class CdpError(RuntimeError):
    pass


class Browser:
    def __init__(self, work_dir, timeout_s=10.0):
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="console-chromium-", dir=work_dir)
        self.requests = []  # URLs, in the order asked
        self._next_id = 0
        self._answers = {}
        self._cv = threading.Condition()
        self._proc = None

    def __enter__(self):
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()

        def child_fds():
            # Moved out of the way first: a pipe end may itself be fd 3 or 4.
            a, b = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        argv = [find_chromium(), "--headless=new", "--remote-debugging-pipe",
                "--user-data-dir=" + self.profile, "--no-first-run", "--no-default-browser-check",
                "--disable-gpu", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--disable-component-update",
                "--disable-dev-shm-usage", "--window-size=1100,900", "about:blank"]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")  # Chromium refuses root with its sandbox
        self._log = open(os.path.join(self.profile, "chromium.log"), "wb")
        self._proc = subprocess.Popen(argv, preexec_fn=child_fds, pass_fds=(3, 4),
                                      stdout=self._log, stderr=subprocess.STDOUT)
        for fd in (to_browser_r, from_browser_w):
            os.close(fd)
        self._out = os.fdopen(to_browser_w, "wb", buffering=0)
        self._in = os.fdopen(from_browser_r, "rb", buffering=0)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self._proc and self._proc.poll() is None:
            try:
                self.send("Browser.close", timeout_s=3)
            except (CdpError, OSError):
                pass
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def _read(self):
        buf = b""
        while True:
            chunk = self._in.read(65536)
            if not chunk:
                with self._cv:
                    self._answers[None] = "closed"
                    self._cv.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                self._dispatch(json.loads(raw))

    def _dispatch(self, msg):
        if msg.get("method") == "Network.requestWillBeSent":
            self.requests.append(msg["params"]["request"]["url"])
        if "id" in msg:
            with self._cv:
                self._answers[msg["id"]] = msg
                self._cv.notify_all()

    def send(self, method, params=None, session=None, timeout_s=None):
        with self._cv:
            self._next_id += 1
            ident = self._next_id
        msg = {"id": ident, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self._out.write(json.dumps(msg).encode() + b"\0")
        until = time.monotonic() + (timeout_s or self.timeout_s)
        with self._cv:
            while ident not in self._answers:
                left = until - time.monotonic()
                if left <= 0 or None in self._answers:
                    raise CdpError("%s: no answer (browser %s)" % (
                        method, "closed" if None in self._answers else "silent"))
                self._cv.wait(left)
            answer = self._answers.pop(ident)
        if "error" in answer:
            raise CdpError("%s: %s" % (method, answer["error"]))
        return answer.get("result", {})

    def new_page(self):
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget",
                            {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Network"):
            page.send(domain + ".enable")
        return page


class Page:
    def __init__(self, browser, session):
        self.browser, self.session = browser, session

    def send(self, method, params=None):
        return self.browser.send(method, params, session=self.session)

    def navigate(self, url):
        self.send("Page.navigate", {"url": url})

    def eval(self, expression):
        """The value of a JavaScript expression (a promise is awaited)."""
        r = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                           "returnByValue": True})
        if "exceptionDetails" in r:
            raise CdpError("page threw: %s" % json.dumps(r["exceptionDetails"])[:600])
        return r["result"].get("value")

    def wait(self, what, expression, timeout_s=10.0):
        """Until the expression is truthy; its value."""
        until = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < until:
            try:
                last = self.eval(expression)
            except CdpError as e:
                last = str(e)
            else:
                if last:
                    return last
            time.sleep(0.05)
        raise CdpError("timed out after %.0f s waiting for %s (last: %r)" % (timeout_s, what, last))

    def screenshot(self, path, selector=None, scale=1.0):
        """The whole page, or the element `selector` names, as a PNG at `scale`."""
        what = "document.documentElement" if selector is None else \
            "document.querySelector(%s)" % json.dumps(selector)
        box = self.eval("(() => { const r = %s.getBoundingClientRect(); return {x: r.left + "
                        "scrollX, y: r.top + scrollY, width: r.width, height: r.height}; })()"
                        % what)
        box["scale"] = scale
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                    "clip": box})
        with open(path, "wb") as f:
            f.write(base64.b64decode(data["data"]))
