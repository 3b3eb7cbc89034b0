"""Screenshots of a trace open in the Perfetto UI, through chromedriver (WebDriver).

    python bench/perfetto_shot.py URL OUT_DIR

URL serves the Perfetto UI with the trace loaded (`vizviewer --server_only` does). Writes
three PNGs to OUT_DIR: the whole trace, one step (the second `step` slice selected, the
first being the warm-up) and one block's forward (the second `h.0 forward` selected), each
with the selection's details (name, duration) in the panel below. Selection goes through
the UI's own search box (Enter moves to the next match and brings it into view), so
nothing depends on where the slices happen to lie on the screen.
"""

import base64
import json
import subprocess
import sys
import time
import urllib.request

DRIVER = "http://127.0.0.1:9515"


def req(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(DRIVER + path, data=data, method=method,
                               headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(r, timeout=120).read())["value"]


class Page:
    def __init__(self, url):
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "args": ["--headless=new", "--no-sandbox", "--window-size=1800,1100", "--disable-gpu"]}}}}
        self.s = req("POST", "/session", caps)["sessionId"]
        req("POST", f"/session/{self.s}/url", {"url": url})

    def shot(self, path):
        open(path, "wb").write(base64.b64decode(req("GET", f"/session/{self.s}/screenshot")))
        print("wrote", path)

    def key_actions(self, actions):
        """Sends one sequence of WebDriver key actions (keyDown/keyUp) to the page."""
        req("POST", f"/session/{self.s}/actions",
            {"actions": [{"type": "key", "id": "k", "actions": actions}]})

    def keys(self, text):
        """Presses and releases each key of `text` in turn."""
        actions = []
        for k in text:
            actions += [{"type": "keyDown", "value": k}, {"type": "keyUp", "value": k}]
        self.key_actions(actions)
        time.sleep(1)

    def search(self, text, nth):
        """Types into the omnibox and presses Enter `nth` times (one match per press)."""
        box = req("POST", f"/session/{self.s}/element",
                  {"using": "css selector", "value": "input"})
        el = next(iter(box.values()))
        req("POST", f"/session/{self.s}/element/{el}/click", {})
        # Select all and delete with keys: the box keeps its text in the page's own
        # state, which WebDriver's element clear does not reach.
        self.key_actions([
            {"type": "keyDown", "value": "\ue009"}, {"type": "keyDown", "value": "a"},
            {"type": "keyUp", "value": "a"}, {"type": "keyUp", "value": "\ue009"},
            {"type": "keyDown", "value": "\ue003"}, {"type": "keyUp", "value": "\ue003"}])
        req("POST", f"/session/{self.s}/element/{el}/value", {"text": text})
        time.sleep(2)
        for _ in range(nth):
            self.keys("\ue007")  # Enter

    def leave_search(self):
        """Takes the focus off the search box, keeping its match selected."""
        req("POST", f"/session/{self.s}/execute/sync",
            {"script": "document.activeElement.blur()", "args": []})
        time.sleep(2)

    def close(self):
        req("DELETE", f"/session/{self.s}")


def main():
    url, out = sys.argv[1], sys.argv[2]
    driver = subprocess.Popen(["chromedriver", "--port=9515"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        page = Page(url)
        time.sleep(25)  # the UI loads its wasm trace processor, then the trace
        page.shot(f"{out}/perfetto-whole-run.png")
        page.search("step", 2)
        page.leave_search()
        page.shot(f"{out}/perfetto-one-step.png")
        page.search("h.0 forward", 2)
        page.leave_search()
        page.shot(f"{out}/perfetto-one-block.png")
        page.close()
    finally:
        driver.terminate()


if __name__ == "__main__":
    main()
