#!/usr/bin/python3
"""The report, opened in headless Chromium and driven through Selenium (ctest report.browser).

Writes a quick report with the attnlab command, opens report/index.html from file:// with
every network name unresolvable, and checks what a reader would see:
  - the plotting library and every image load from file://, and nothing is fetched from
    anywhere else;
  - moving each slider (with the keyboard, as a reader would) and flipping each toggle
    changes the plot it drives;
  - at a phone's width (412 px) nothing overflows sideways;
  - every claim has a verdict and a figure of its own;
  - the page's shape, at 1280 x 800 and at 412 x 900: the first screen shows a figure (an image
    or the interactive's plot), every image has alt text, every verdict badge agrees with its
    claim's checks in report.json (a failed check never sits under a green "holds"), and the
    main path (the text outside closed <details>) is under 4,000 words. The full page's height
    and the main path's word count at each width are printed.
Exit 0 when all hold, 1 (with the reasons) when one does not, 77 (skipped, ctest's
SKIP_RETURN_CODE) when Chromium, chromedriver or Selenium is missing.

    report_browser.py --attnlab build/attnlab --work DIR
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

SKIP = 77


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(SKIP)


try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
except ImportError:
    skip("python3-selenium is not installed (optional in scripts/debian-packages.txt)")


def find(*names):
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


class Checks:
    def __init__(self):
        self.failures = []

    def expect(self, ok, what):
        print(("ok    " if ok else "FAIL  ") + what)
        if not ok:
            self.failures.append(what)


def start_browser(chromium, chromedriver, width, height):
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--hide-scrollbars", f"--window-size={width},{height}",
                 # No network: every host name fails to resolve, so a page that fetched anything from
                 # the web would show it (the library would not load, an image would break).
                 "--host-resolver-rules=MAP * ~NOTFOUND"):
        options.add_argument(flag)
    # Every request the page makes, from Chrome's DevTools log (Network.requestWillBeSent).
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    return webdriver.Chrome(service=Service(chromedriver), options=options)


def requested_urls(driver):
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def wait_for(driver, script, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.1)
    return driver.execute_script(script)


def plot_data(driver, element_id):
    """The data of a Plotly plot, as JSON (so that two states can be compared)."""
    return driver.execute_script(
        "var gd = document.getElementById(arguments[0]);"
        "return gd && gd.data ? JSON.stringify(gd.data.map(function (t) {"
        "  return {x: t.x ? Array.from(t.x) : null, y: t.y ? Array.from(t.y) : null, z: t.z || null}; })) : null;",
        element_id)


def cjk_quotes(driver, checks):
    """The articles' Chinese words name a CJK font that this machine has (fonts-noto-cjk), so
    they render as characters, not as empty boxes."""
    try:
        installed = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True).stdout
    except FileNotFoundError:
        installed = ""
    families = {f.strip() for line in installed.splitlines() for f in line.split(",") if f.strip()}
    stacks = driver.execute_script(
        "return Array.from(document.querySelectorAll('[lang=zh]')).map(function (e) {"
        "  return getComputedStyle(e).fontFamily; });")
    checks.expect(bool(stacks), f"the page has Chinese quotes marked lang=zh ({len(stacks)})")
    if not families:
        print("note  no CJK font installed (fonts-noto-cjk is optional): the Chinese quotes are not checked")
        return
    unrendered = [s for s in stacks if not any(f.strip().strip('"') in families for f in s.split(","))]
    checks.expect(stacks and not unrendered,
                  f"every Chinese quote names an installed CJK font (without one: {unrendered[:2]})")


def press(driver, element_id, key, times):
    slider = driver.find_element(By.ID, element_id)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", slider)
    slider.click()
    for _ in range(times):
        slider.send_keys(key)


def check_assets_and_images(driver, checks, url):
    checks.expect(wait_for(driver, "return document.body.getAttribute('data-interactive') === 'ready';"),
                  "the interactive figures start (plotly.js loaded from assets/)")
    checks.expect(driver.execute_script("return typeof Plotly !== 'undefined' && !!Plotly.react;"),
                  "window.Plotly is the plotting library")
    # Lazy images load when scrolled to: ask for all of them now, then wait.
    driver.execute_script("document.querySelectorAll('img').forEach(function (i) { i.loading = 'eager'; });")
    wait_for(driver, "return Array.from(document.images).every(function (i) { return i.complete; });")
    images = driver.execute_script(
        "return Array.from(document.images).map(function (i) {"
        "  return {src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0,"
        "          width: i.getAttribute('width'), height: i.getAttribute('height'),"
        "          lazy: i.getAttribute('loading')}; });")
    broken = [i["src"] for i in images if not i["ok"]]
    checks.expect(len(images) >= 12 and not broken, f"all {len(images)} images load from file:// (broken: {broken})")
    unsized = [i["src"] for i in images if not (i["width"] and i["height"])]
    checks.expect(not unsized, f"every image has its width and height set (missing: {unsized})")
    cjk_quotes(driver, checks)
    requests = requested_urls(driver)
    remote = [r for r in requests if not r.startswith(("file://", "data:", "blob:"))]
    checks.expect(requests and not remote,
                  f"everything the page requested is a local file ({len(requests)} requests; others: {remote})")
    checks.expect(any(r.startswith("file://") and r.endswith("/assets/plotly-cartesian.min.js") for r in requests),
                  "plotly-cartesian.min.js was loaded from the report's assets/ (file://)")
    checks.expect(driver.execute_script("return !!document.querySelector('meta[name=viewport]');"),
                  "the page has a viewport tag")


def check_interaction(driver, checks):
    bars, heatmap, norm = (plot_data(driver, i) for i in ("softmax-bars", "jacobian-heatmap", "jacobian-norm"))
    checks.expect(bars and heatmap and norm, "the softmax bars, the Jacobian heatmap and the ‖J‖_F curve are drawn")
    text = driver.find_element(By.ID, "softmax-numbers").text
    press(driver, "a-slider", Keys.ARROW_RIGHT, 40)  # a: 1 → 10^0.8 ≈ 6.3
    checks.expect(driver.find_element(By.ID, "a-value").text != "1.00", "the scale slider moves a")
    checks.expect(plot_data(driver, "softmax-bars") != bars, "moving a redraws the softmax bars")
    checks.expect(plot_data(driver, "jacobian-heatmap") != heatmap, "moving a redraws the Jacobian heatmap")
    checks.expect(plot_data(driver, "jacobian-norm") != norm, "moving a moves the ‖J‖_F marker")
    checks.expect(driver.find_element(By.ID, "softmax-numbers").text != text, "moving a updates ‖J‖_F and the weights")

    driver.find_element(By.ID, "logits-random").click()
    bars = plot_data(driver, "softmax-bars")
    press(driver, "dk-slider", Keys.ARROW_RIGHT, 3)  # d_k 64 → 512
    checks.expect(driver.find_element(By.ID, "dk-value").text == "512", "the d_k slider moves d_k")
    checks.expect(plot_data(driver, "softmax-bars") != bars, "moving d_k redraws the softmax bars")
    bars = plot_data(driver, "softmax-bars")
    driver.find_element(By.ID, "dk-scaled").click()  # no longer divided by √d_k
    checks.expect(plot_data(driver, "softmax-bars") != bars, "the √d_k toggle changes the softmax bars")

    hist = plot_data(driver, "score-histogram")
    checks.expect(bool(hist), "the score histogram is drawn")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", driver.find_element(By.ID, "hist-scaled"))
    driver.find_element(By.ID, "hist-scaled").click()
    scaled = plot_data(driver, "score-histogram")
    checks.expect(scaled != hist, "the scaled/unscaled toggle changes the score histogram")
    press(driver, "hist-dk-slider", Keys.ARROW_LEFT, 2)
    checks.expect(plot_data(driver, "score-histogram") != scaled, "the histogram's d_k slider changes it")


def check_claims(driver, checks, expected):
    claims = driver.execute_script(
        "return Array.from(document.querySelectorAll('details.claim')).map(function (s) {"
        "  return {id: s.id, verdict: !!s.querySelector('summary .verdict'),"
        "          figures: Array.from(s.querySelectorAll('figure img')).map(function (i) { return i.getAttribute('src'); })}; });")
    checks.expect(len(claims) == expected and expected >= 13,
                  f"one section per claim of report.json, C1 to C13 at least ({len(claims)} of {expected})")
    checks.expect(all(c["verdict"] for c in claims), "every claim shows a verdict")
    no_figure = [c["id"] for c in claims if not c["figures"]]
    checks.expect(not no_figure, f"every claim shows a figure (none: {no_figure})")
    firsts = [c["figures"][0] for c in claims if c["figures"]]
    shared = sorted({f for f in firsts if firsts.count(f) > 1})
    checks.expect(not shared, f"every claim's first figure is its own (shared: {shared})")
    # The table's link to a claim opens its evidence, closed until then.
    closed = driver.execute_script("return Array.from(document.querySelectorAll('details.claim')).every("
                                   "function (d) { return !d.open; });")
    checks.expect(closed, "every claim's evidence starts closed")
    link = driver.find_element(By.CSS_SELECTOR, "table.claims a[href='#C7']")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", link)
    link.click()
    checks.expect(wait_for(driver, "return document.getElementById('C7').open;", 5),
                  "the claims table's link to C7 opens its evidence")


MAIN_PATH_WORDS = 4000

# The words a reader meets without opening anything: text outside <script>/<style> and outside
# the body of a closed <details> (its <summary> is shown).
MAIN_PATH_WORDS_JS = """
var count = 0;
var walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
function hidden(node) {
  var shown = null;  // the <details> whose <summary> holds the node: its summary is shown closed
  for (var e = node.parentElement; e; e = e.parentElement) {
    if (/^(SCRIPT|STYLE|NOSCRIPT|TEMPLATE)$/.test(e.tagName)) return true;
    if (e.tagName === 'SUMMARY') shown = e.parentElement;
    else if (e.tagName === 'DETAILS' && !e.open && e !== shown) return true;
  }
  return false;
}
for (var n = walker.nextNode(); n; n = walker.nextNode()) {
  if (hidden(n)) continue;
  count += n.nodeValue.split(/\s+/).filter(function (w) { return /[\p{L}\p{N}]/u.test(w); }).length;
}
return count;
"""


def page_shape(driver, checks, url, width, height, verdicts_by_claim):
    """The explainer's shape at one viewport size; returns (full-page height px, main-path words)."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 640})
    driver.get(url)
    wait_for(driver, "return document.body.getAttribute('data-interactive') === 'ready';")
    driver.execute_script("window.scrollTo(0, 0);")
    first = driver.execute_script(
        "var h = window.innerHeight, found = [];"
        "document.querySelectorAll('img, canvas, svg.main-svg').forEach(function (e) {"
        "  var r = e.getBoundingClientRect();"
        "  if (r.width > 0 && r.height > 0 && r.top >= 0 && r.top < h) found.push(e.tagName + ' ' + (e.getAttribute('src') || e.id));"
        "});"
        "return found;")
    checks.expect(bool(first), f"{width} x {height}: the first screen shows a figure ({first[:2]})")
    no_alt = driver.execute_script(
        "return Array.from(document.images).filter(function (i) { return !(i.getAttribute('alt') || '').trim(); })"
        "  .map(function (i) { return i.getAttribute('src'); });")
    checks.expect(not no_alt, f"{width} x {height}: every image has alt text (without: {no_alt[:5]})")
    # Every badge of a claim (its row in the table and its evidence's heading) against its checks.
    badges = driver.execute_script(
        "var out = {};"
        "document.querySelectorAll('table.claims tr, details.claim > summary').forEach(function (e) {"
        "  var link = e.querySelector('a[href^=\"#C\"]'), id = e.tagName === 'SUMMARY' ? e.parentElement.id : link && link.getAttribute('href').slice(1);"
        "  var b = e.querySelector('.verdict'); if (!id || !b) return;"
        "  (out[id] = out[id] || []).push(['confirmed', 'refuted', 'inconclusive', 'pending'].filter(function (c) { return b.classList.contains(c); })[0]);"
        "});"
        "return out;")
    wrong = []
    for claim, outcomes in verdicts_by_claim.items():
        shown = badges.get(claim, [])
        if len(shown) != 2:
            wrong.append(f"{claim}: {len(shown)} badges")
        # The legend's invariants (the rule itself is claim_verdict's, src/lab/claim_verdict.hpp):
        # "holds" with no failed check and every main check held; "does not hold" exactly when
        # the main check (claims.json's main_check; the non-supplementary one) failed.
        main = [o for o, supplementary in outcomes if not supplementary]
        for badge in shown:
            ok = (badge == "pending") == (not outcomes)
            ok = ok and not (badge == "confirmed" and (any(o == "refuted" for o, _ in outcomes) or
                                                      not main or any(o != "confirmed" for o in main)))
            ok = ok and (badge == "refuted") == any(o == "refuted" for o in main)
            if not ok:
                wrong.append(f"{claim}: badge {badge}, checks {outcomes}")
    checks.expect(not wrong, f"{width} x {height}: every verdict badge agrees with its checks in report.json "
                  f"(disagree: {wrong})")
    words = driver.execute_script(MAIN_PATH_WORDS_JS)
    checks.expect(words < MAIN_PATH_WORDS, f"{width} x {height}: the main path has {words} words (< {MAIN_PATH_WORDS})")
    full = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]["height"]
    print(f"shape   {width} x {height}: full page {full:.0f} px, main path {words} words")
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return full, words


def check_narrow(driver, checks, url):
    # A phone opens the page at its own width. (Headless Chrome keeps windows at least 500 px
    # wide, so the phone's viewport is emulated through the DevTools protocol.)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 412, "height": 900, "deviceScaleFactor": 2, "mobile": True})
    driver.get(url)
    wait_for(driver, "return document.body.getAttribute('data-interactive') === 'ready';")
    width = driver.execute_script("return document.documentElement.clientWidth;")
    checks.expect(width == 412, f"the page is laid out at 412 px ({width} px)")
    plots = driver.execute_script(
        "return Array.from(document.querySelectorAll('.plot')).map(function (e) {"
        "  var svg = e.querySelector('svg.main-svg');"
        "  return {id: e.id, div: e.getBoundingClientRect().right, svg: svg ? svg.getBoundingClientRect().right : 0}; });")
    clipped = [p["id"] for p in plots if p["svg"] > p["div"] + 1 or p["div"] > width + 1]
    checks.expect(plots and not clipped, f"every interactive plot fits the width (too wide: {clipped})")
    overflow = driver.execute_script(
        "var w = document.documentElement.clientWidth;"
        "var wide = Array.from(document.querySelectorAll('body *')).filter(function (e) {"
        "  var r = e.getBoundingClientRect(); return r.width > 0 && r.right > w + 1; })"
        "  .slice(0, 5).map(function (e) { return e.tagName + (e.id ? '#' + e.id : '') + (e.className ? '.' + e.className : ''); });"
        "return {page: document.documentElement.scrollWidth, viewport: w, wide: wide};")
    checks.expect(overflow["page"] <= overflow["viewport"] and not overflow["wide"],
                  f"no horizontal overflow at 412 px (page {overflow['page']} px, viewport {overflow['viewport']} px, "
                  f"too wide: {overflow['wide']})")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--attnlab", required=True, help="the attnlab command")
    parser.add_argument("--work", required=True, help="a scratch directory (replaced)")
    parser.add_argument("--report", help="check this report instead of writing a quick one")
    args = parser.parse_args()
    chromium = find("chromium", "chromium-browser", "google-chrome")
    chromedriver = find("chromedriver")
    if not chromium:
        skip("Chromium is not installed (Debian chromium, optional)")
    if not chromedriver:
        skip("chromedriver is not installed (Debian chromium-driver, optional)")

    report = args.report
    if report is None:
        shutil.rmtree(args.work, ignore_errors=True)
        os.makedirs(args.work)
        report = os.path.join(args.work, "report")
        started = time.time()
        subprocess.run([args.attnlab, "report", "--quick", "--out", report], check=True, stdout=subprocess.DEVNULL)
        print(f"quick report written in {time.time() - started:.1f} s")
    url = "file://" + os.path.abspath(os.path.join(report, "index.html"))
    checks = Checks()
    claims = json.load(open(os.path.join(report, "report.json")))["claims"]
    verdicts = {c["id"]: c["verdict"] for c in claims}
    checks_by_claim = {c["id"]: [(check["verdict"], check.get("supplementary", False)) for check in c["checks"]]
                       for c in claims}
    checks.expect(len(verdicts) >= 13 and "pending" not in verdicts.values(),
                  f"report.json has a verdict for every claim ({verdicts})")

    driver = start_browser(chromium, chromedriver, 1280, 800)
    try:
        started = time.time()
        driver.get(url)
        check_assets_and_images(driver, checks, url)
        check_interaction(driver, checks)
        check_claims(driver, checks, len(verdicts))
        for width, height in ((1280, 800), (412, 900)):
            page_shape(driver, checks, url, width, height, checks_by_claim)
        check_narrow(driver, checks, url)
        print(f"browser checks in {time.time() - started:.1f} s")
    finally:
        driver.quit()
    if checks.failures:
        print(f"{len(checks.failures)} check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
