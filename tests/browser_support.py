"""Headless Chromium driven over the DevTools protocol, for tests that look at a page
the way a person would: a screenshot, the console, and every request the page makes.

The browser listens on 127.0.0.1 on a port it picks itself (``--remote-debugging-port=0``;
it writes the port to ``DevToolsActivePort`` in its profile directory), so parallel
test runs never collide. Only the browser process started here is stopped.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from typing import Any, Dict, List, Optional

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars",
    "--mute-audio",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
]


def chromium_path() -> Optional[str]:
    """``TFRECORD_IO_CHROMIUM``, else Debian's ``/usr/bin/chromium`` (scripts/setup-chromium)."""
    path = os.environ.get("TFRECORD_IO_CHROMIUM") or "/usr/bin/chromium"
    return path if os.path.exists(path) else None


class PageLoad:
    """What one page load showed: console errors, requests, and evaluation results."""

    def __init__(self) -> None:
        self.console_errors: List[str] = []
        self.requests: List[str] = []


class Browser:
    """``with Browser() as b: load = b.open(url); b.screenshot(...)``."""

    def __init__(self, binary: Optional[str] = None, width: int = 1280, height: int = 1600, timeout: float = 60.0):
        self.binary = binary or chromium_path()
        if not self.binary:
            raise FileNotFoundError("no Chromium: run scripts/setup-chromium or set TFRECORD_IO_CHROMIUM")
        self.width, self.height, self.timeout = width, height, timeout
        self._profile = tempfile.mkdtemp(prefix="tfrecord-io-chromium-")
        self._proc: Optional[subprocess.Popen] = None
        self._ws = None
        self._next_id = 0
        self._events: List[Dict[str, Any]] = []

    # ------------------------------------------------------------------ process

    def __enter__(self) -> Browser:
        self._proc = subprocess.Popen(
            [
                self.binary,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={self._profile}",
                f"--window-size={self.width},{self.height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port = self._wait_for_port()
        self._connect(port)
        return self

    def _wait_for_port(self) -> int:
        marker = os.path.join(self._profile, "DevToolsActivePort")
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"chromium exited with status {self._proc.returncode} before listening")
            try:
                with open(marker) as f:
                    first = f.readline().strip()
                if first:
                    return int(first)
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"chromium did not open its DevTools port within {self.timeout:.0f}s")

    def _connect(self, port: int) -> None:
        import websocket  # websocket-client (the dev extra)

        deadline = time.monotonic() + self.timeout
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
                targets = [t for t in json.load(resp) if t.get("type") == "page"]
            if targets:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("chromium has no page target")
            time.sleep(0.1)
        self._ws = websocket.create_connection(
            targets[0]["webSocketDebuggerUrl"], timeout=self.timeout, suppress_origin=True
        )
        for domain in ("Page", "Network", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=self.width,
            height=self.height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def __exit__(self, *exc) -> None:
        if self._ws is not None:
            try:
                self._ws.close()
            except Exception:  # noqa: BLE001 - closing a dead socket
                pass
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=15)
        shutil.rmtree(self._profile, ignore_errors=True)

    # ------------------------------------------------------------------ protocol

    def call(self, method: str, **params: Any) -> Dict[str, Any]:
        """Send one command and wait for its answer; events seen meanwhile are kept."""
        self._next_id += 1
        my_id = self._next_id
        self._ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            message = json.loads(self._ws.recv())
            if message.get("id") == my_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self._events.append(message)
        raise TimeoutError(f"{method}: no answer within {self.timeout:.0f}s")

    def _wait_event(self, method: str) -> Dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        for i, event in enumerate(self._events):
            if event["method"] == method:
                return self._events.pop(i)
        while time.monotonic() < deadline:
            message = json.loads(self._ws.recv())
            if message.get("method") == method:
                return message
            if "method" in message:
                self._events.append(message)
        raise TimeoutError(f"no {method} within {self.timeout:.0f}s")

    def evaluate(self, expression: str, await_promise: bool = False) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=await_promise)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    # ------------------------------------------------------------------ pages

    def open(self, url: str, settle: float = 0.5) -> PageLoad:
        """Load ``url``, wait for its load event (and ``settle`` seconds more), and
        return the console errors and the URLs of every request it made."""
        self._events.clear()
        self.call("Page.navigate", url=url)
        self._wait_event("Page.loadEventFired")
        time.sleep(settle)
        self.evaluate("1")  # drain the events that arrived while settling
        load = PageLoad()
        for event in self._events:
            method, params = event["method"], event.get("params", {})
            if method == "Network.requestWillBeSent":
                load.requests.append(params["request"]["url"])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                load.console_errors.append(
                    " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
                )
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                load.console_errors.append(
                    details.get("exception", {}).get("description") or details.get("text", "exception")
                )
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                load.console_errors.append(params["entry"].get("text", ""))
        return load

    def screenshot(self, path: str, clip: Optional[Dict[str, float]] = None) -> str:
        """A PNG of the page (or of ``clip``: x, y, width, height in page pixels)."""
        params: Dict[str, Any] = {"format": "png", "captureBeyondViewport": True}
        if clip:
            params["clip"] = {**clip, "scale": 1}
        data = self.call("Page.captureScreenshot", **params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path
