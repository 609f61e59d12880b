#!/usr/bin/env bash
# Render a tangentlab report.html in Debian's headless chromium and save a screenshot.
#
#   [WIDTH=1400] [HEIGHT=4000] scripts/check_report_in_browser.sh [REPORT_HTML] [SCREENSHOT_PNG]
#
# Defaults: runs/latest/report.html and <report dir>/report-screenshot.png; the window is
# WIDTH x HEIGHT pixels (the screenshot's size).
# Install the browser once with: apt-get update && apt-get install -y chromium
# The report is self-contained (figures embedded, no scripts, no external resources), so it is
# loaded from a file:// URL with networking disabled; any console error chromium prints about the
# page is shown. Then a copy of the page with a small measuring script added is laid out at the
# same width (--dump-dom): every block that runs past the page's width, and every table cell whose
# text runs out of the cell, is listed.
# Exit status: 0 when the screenshot was written and is not blank and the page fits its width,
# 1 otherwise.
set -euo pipefail

report="${1:-runs/latest/report.html}"
if [[ ! -f "$report" ]]; then
    echo "check_report_in_browser: no report at $report (run 'tangentlab reproduce --quick' first)" >&2
    exit 1
fi
report_abs="$(cd "$(dirname "$report")" && pwd)/$(basename "$report")"
shot="${2:-$(dirname "$report_abs")/report-screenshot.png}"
case "$shot" in /*) ;; *) shot="$(pwd)/$shot" ;; esac
width="${WIDTH:-1400}"
height="${HEIGHT:-4000}"

browser=""
for candidate in chromium chromium-browser google-chrome; do
    if command -v "$candidate" >/dev/null 2>&1; then browser="$candidate"; break; fi
done
if [[ -z "$browser" ]]; then
    echo "check_report_in_browser: chromium not found; install it with: apt-get update && apt-get install -y chromium" >&2
    exit 1
fi

profile="$(mktemp -d)"
log="$(mktemp)"
probe="$(mktemp -d)"
trap 'rm -rf "$profile" "$log" "$probe"' EXIT
rm -f "$shot"
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --enable-logging=stderr --v=0 \
    --screenshot="$shot" --window-size="$width,$height" "file://$report_abs" >"$log" 2>&1 || {
    echo "check_report_in_browser: $browser exited with an error:" >&2
    cat "$log" >&2
    exit 1
}
# Page-level problems (not chromium's own start-up chatter about dbus, GPU or crash reporting).
if grep -E "CONSOLE|Uncaught|Failed to load resource|ERR_FILE_NOT_FOUND" "$log" >&2; then
    echo "check_report_in_browser: the page logged errors (above)" >&2
    exit 1
fi
if [[ ! -s "$shot" ]]; then
    echo "check_report_in_browser: no screenshot was written" >&2
    cat "$log" >&2
    exit 1
fi
python3 - "$shot" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
# Decode the PNG (8-bit RGB/RGBA, no interlace, as chromium writes) and require non-blank pixels.
pos, idat, w, h, ctype = 8, b"", 0, 0, 0
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8]); body = data[pos + 8:pos + 8 + n]; pos += 12 + n
    if kind == b"IHDR":
        w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
    elif kind == b"IDAT":
        idat += body
raw = zlib.decompress(idat)
bpp = {2: 3, 6: 4}.get(ctype, 4)
stride = w * bpp + 1
rows = [raw[i * stride + 1:(i + 1) * stride] for i in range(0, h, max(1, h // 200))]
distinct = {bytes(r[j:j + 3]) for r in rows for j in range(0, len(r), bpp * 7)}
print(f"screenshot {sys.argv[1]}: {w}x{h}, {len(distinct)} distinct sampled colours")
sys.exit(0 if len(distinct) > 4 else 1)
PY

# Layout: the same page plus a measuring script, laid out at the same width. The script lists
# every element that ends right of the viewport and every table cell whose content is wider than
# the cell (text running out of it), then writes the list into the page for --dump-dom.
python3 - "$report_abs" "$probe/page.html" <<'PY'
import sys
page = open(sys.argv[1], encoding="utf-8").read()
probe = r'''<script>
(function () {
  var vw = document.documentElement.clientWidth, out = [];
  var heads = Array.prototype.slice.call(document.querySelectorAll("h1,h2,h3,h4"));
  function where(el) {  // the element, under the last heading before it
    var h = null;
    heads.forEach(function (x) {
      if (x.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING) h = x;
    });
    return el.tagName.toLowerCase() + (el.className ? "." + el.className : "") +
      (h ? " under '" + h.textContent.trim().slice(0, 60) + "'" : "");
  }
  function past(el) {
    var r = el.getBoundingClientRect();
    return r.width > 0 && r.right > vw + 1 ? Math.round(r.right) : 0;
  }
  document.querySelectorAll("body *").forEach(function (el) {
    if (el.tagName === "SCRIPT" || el.closest("pre")) return;
    var right = past(el);  // listed once, at the outermost element that runs past the page
    if (right && !(el.parentElement && past(el.parentElement))) out.push("past the page (" +
      right + " > " + vw + " px): " + where(el));
    if ((el.tagName === "TD" || el.tagName === "TH") && el.scrollWidth > el.clientWidth + 1)
      out.push("out of its cell (" + el.scrollWidth + " > " + el.clientWidth + " px): " + where(el));
  });
  if (document.documentElement.scrollWidth > vw) out.unshift("page scrolls sideways (" +
    document.documentElement.scrollWidth + " > " + vw + " px)");
  var pre = document.createElement("pre");
  pre.id = "layout-check";
  pre.textContent = out.length ? "LAYOUT-OVERFLOW\n" + out.slice(0, 40).join("\n")
    : "LAYOUT-FITS " + vw;
  document.body.appendChild(pre);
})();
</script>'''
open(sys.argv[2], "w", encoding="utf-8").write(page.replace("</body>", probe + "</body>", 1))
PY
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --window-size="$width,$height" --dump-dom \
    "file://$probe/page.html" >"$probe/dom.html" 2>"$log" || {
    echo "check_report_in_browser: $browser --dump-dom exited with an error:" >&2
    cat "$log" >&2
    exit 1
}
python3 - "$probe/dom.html" "$width" <<'PY'
import html, re, sys
dom = open(sys.argv[1], encoding="utf-8").read()
m = re.search(r'<pre id="layout-check">(.*?)</pre>', dom, re.S)
if not m:
    print("check_report_in_browser: the layout probe did not run", file=sys.stderr)
    sys.exit(1)
text = html.unescape(m.group(1))
if text.startswith("LAYOUT-FITS"):
    print(f"layout: the page fits {sys.argv[2]} px (nothing runs past it or out of a table cell)")
    sys.exit(0)
print(f"check_report_in_browser: at {sys.argv[2]} px the page does not fit:", file=sys.stderr)
print(text.split("\n", 1)[1], file=sys.stderr)
sys.exit(1)
PY
