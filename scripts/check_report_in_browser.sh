#!/usr/bin/env bash
# Render a tangentlab report.html in Debian's headless chromium and save a screenshot.
#
#   scripts/check_report_in_browser.sh [REPORT_HTML] [SCREENSHOT_PNG]
#
# Defaults: runs/latest/report.html and <report dir>/report-screenshot.png.
# Install the browser once with: apt-get update && apt-get install -y chromium
# The report is self-contained (figures embedded, no scripts, no external resources), so it is
# loaded from a file:// URL with networking disabled; any console error chromium prints about the
# page is shown. Exit status: 0 when the screenshot was written and is not blank, 1 otherwise.
set -euo pipefail

report="${1:-runs/latest/report.html}"
if [[ ! -f "$report" ]]; then
    echo "check_report_in_browser: no report at $report (run 'tangentlab reproduce --quick' first)" >&2
    exit 1
fi
report_abs="$(cd "$(dirname "$report")" && pwd)/$(basename "$report")"
shot="${2:-$(dirname "$report_abs")/report-screenshot.png}"
case "$shot" in /*) ;; *) shot="$(pwd)/$shot" ;; esac

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
trap 'rm -rf "$profile" "$log"' EXIT
rm -f "$shot"
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --enable-logging=stderr --v=0 \
    --screenshot="$shot" --window-size=1400,4000 "file://$report_abs" >"$log" 2>&1 || {
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
