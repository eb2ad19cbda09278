"""Headless Chromium driven over the DevTools protocol on a pipe (no port, no websocket library).

Used by tests/test_report.py to load a report from disk with networking disabled, take a
screenshot, read the DOM, and collect console errors, exceptions and every network request.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
         "--disable-extensions", "--hide-scrollbars", "--mute-audio", "--disable-dev-shm-usage",
         # networking off: every host name fails to resolve and every proxied request goes nowhere
         "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]


def find() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


class Chromium:
    def __init__(self, binary: str, timeout: float = 60.0):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="ampkit-chromium-")
        to_browser_r, self._w = os.pipe()
        self._r, from_browser_w = os.pipe()

        def child_fds():  # the protocol pipe is fd 3 (commands in) and fd 4 (replies out)
            a = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)  # out of the way first: they may be 3 or 4
            b = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-pipe",
                                      "about:blank"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, preexec_fn=child_fds, pass_fds=(3, 4))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._next()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def _next(self) -> dict:
        deadline = time.monotonic() + self.timeout
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def wait_for(self, method: str) -> dict:
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        while True:
            ev = self._next()
            self.events.append(ev)
            if ev.get("method") == method:
                return ev

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (OSError, RuntimeError, TimeoutError):  # already gone: the wait below reaps it
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)
        shutil.rmtree(self.profile, ignore_errors=True)


def load_page(path: str, width: int = 1280, height: int = 2000, evaluate: dict[str, str] | None = None) -> dict:
    """Open ``path`` from disk; returns the screenshot (PNG bytes), the DOM, console errors,
    exceptions and the URLs of every request the page made; ``evaluate``: name -> a JavaScript
    expression run in the loaded page, its JSON value returned under ``values[name]``."""
    browser = Chromium(find())
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Emulation.setDeviceMetricsOverride",
                     {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
        browser.events.clear()
        browser.send("Page.navigate", {"url": "file://" + os.path.abspath(path)}, session=session)
        browser.wait_for("Page.loadEventFired")
        dom = browser.send("Runtime.evaluate", {"expression": "document.documentElement.outerHTML",
                                                "returnByValue": True}, session=session)["result"]["value"]
        values = {name: browser.send("Runtime.evaluate", {"expression": expr, "returnByValue": True},
                                     session=session)["result"].get("value")
                  for name, expr in (evaluate or {}).items()}
        shot = browser.send("Page.captureScreenshot", {"format": "png"}, session=session)["data"]
        events = list(browser.events)
    finally:
        browser.close()
    errors = []
    for ev in events:
        p = ev.get("params", {})
        if ev.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
            errors.append(" ".join(str(a.get("value", a.get("description"))) for a in p.get("args", [])))
        elif ev.get("method") == "Runtime.exceptionThrown":
            errors.append(p.get("exceptionDetails", {}).get("text", "exception"))
        elif ev.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error", "warning"):
            errors.append(p["entry"].get("text", ""))
        elif ev.get("method") == "Network.loadingFailed":
            errors.append(f"loading failed: {p.get('errorText')}")
    requests = [ev["params"]["request"]["url"] for ev in events if ev.get("method") == "Network.requestWillBeSent"]
    return {"png": base64.b64decode(shot), "dom": dom, "errors": errors, "requests": requests, "values": values}
