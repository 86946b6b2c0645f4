#!/usr/bin/env python3
"""Renders a carto plan report in headless Chromium and checks what a reader would see.

  check_report.py --chromium EXE --work DIR (--html REPORT.html --plan PLAN.json |
                  --carto-plan EXE --plan-args "plan flags") [--sections ...] [--size 1280x900]

With --carto-plan, `carto-plan plan <flags> --out DIR/plan.json --report DIR/report.html` writes
the plan and its report first (timed).

1. The page loads with no console message at all (the report has no scripts, so anything Chromium
   logs to its console — an error, a warning, a failed resource — is a defect).
2. The DOM Chromium builds (--dump-dom) holds every expected <section id=...> and one layout row
   (tr.op-row) per op group, where the expected count is folded here from the plan file itself:
   every op outside a transformer block is a row, and a block whose ops chose the same strategies
   and checkpointing as the block before it folds into that block's rows.
3. A screenshot of the expected size is a PNG whose decoded pixels are not blank: the PNG is
   decoded here (IHDR, IDAT inflated with zlib, the five scanline filters undone) and at least 2%
   of its pixels differ from the page background and it holds at least 8 distinct colours.

Exit code 0: passed; 1: a check failed (the reason on stderr); 77: no Chromium (CTest: skipped).
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
    "--disable-gpu",
    "--hide-scrollbars",
    "--no-first-run",
    "--disable-extensions",
    "--enable-logging=stderr",
    "--log-level=0",
]


def fail(message):
    print("check_report: " + message, file=sys.stderr)
    sys.exit(1)


def run_chromium(exe, args, timeout=120):
    start = time.monotonic()
    r = subprocess.run([exe] + CHROMIUM_FLAGS + args, capture_output=True, timeout=timeout)
    return r, time.monotonic() - start


def expected_rows(plan):
    """Layout rows of the report, folded from the plan file's ops (see the module note)."""
    rows = 0
    previous = None  # the (strategies, checkpointed) of the block before
    block = None
    current = []
    blocks = []
    for op in plan["ops"]:
        m = re.match(r"(block\.\d+)\.", op["name"])
        name = m.group(1) if m else None
        if name != block:
            if block is not None:
                blocks.append(current)
            block, current = name, []
        if name is None:
            rows += 1
            blocks.append(None)  # a non-block op ends a run of blocks
        else:
            current.append((op["strategy"], bool(op["checkpointed"])))
    if block is not None:
        blocks.append(current)
    for b in blocks:
        if b is None:
            previous = None
            continue
        if b != previous:
            rows += len(b)
        previous = b
    return rows


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def decode_png(data):
    """(width, height, bytes per pixel, rows of raw pixel bytes) of an 8-bit RGB or RGBA PNG."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail("the screenshot is not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if zlib.crc32(kind + body) != struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])[0]:
            fail("the screenshot's %s chunk has a bad CRC" % kind.decode("latin-1"))
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    if header is None:
        fail("the screenshot has no IHDR chunk")
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace != 0:
        fail("the screenshot is a PNG of depth %d, colour type %d, interlace %d; expected 8-bit "
             "RGB or RGBA, not interlaced" % (depth, colour, interlace))
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    if len(raw) != height * (stride + 1):
        fail("the screenshot's pixel data has %d bytes; %dx%d needs %d"
             % (len(raw), width, height, height * (stride + 1)))
    rows, prior = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif f == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prior))
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prior[i]) >> 1)) & 0xFF
        elif f == 4:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                up_left = prior[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + paeth(left, prior[i], up_left)) & 0xFF
        elif f != 0:
            fail("the screenshot's row %d has filter type %d" % (y, f))
        rows.append(bytes(line))
        prior = line
    return width, height, bpp, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chromium", required=True)
    ap.add_argument("--html")
    ap.add_argument("--plan")
    ap.add_argument("--carto-plan")
    ap.add_argument("--plan-args", default="")
    ap.add_argument("--work", required=True)
    ap.add_argument("--sections", default="settings,layout,memory,time,frontier")
    ap.add_argument("--size", default="1280x900")
    a = ap.parse_args()
    exe = shutil.which(a.chromium) or (a.chromium if os.path.exists(a.chromium) else None)
    if exe is None:
        print("check_report: no Chromium at '%s' (Debian: apt-get install chromium)" % a.chromium)
        sys.exit(77)
    os.makedirs(a.work, exist_ok=True)
    if a.carto_plan:
        a.plan = os.path.join(a.work, "plan.json")
        a.html = os.path.join(a.work, "report.html")
        command = [a.carto_plan, "plan"] + a.plan_args.split() + ["--out", a.plan, "--report", a.html]
        start = time.monotonic()
        r = subprocess.run(command, capture_output=True, timeout=600)
        if r.returncode != 0:
            fail("%s failed (%d):\n%s" % (" ".join(command), r.returncode, r.stdout.decode()[-3000:]
                                           + r.stderr.decode()[-3000:]))
        print("planned in %.1f s: %s (report %d bytes)"
              % (time.monotonic() - start, " ".join(command), os.path.getsize(a.html)))
    if not a.html or not a.plan:
        fail("give --html and --plan, or --carto-plan and --plan-args")
    url = "file://" + os.path.abspath(a.html)
    with open(a.plan) as f:
        plan = json.load(f)
    if plan.get("format") == "carto-demo-report/1":
        plan = plan["plan"]

    # 1 and 2: the DOM, and the console.
    r, seconds = run_chromium(exe, ["--dump-dom", url])
    if r.returncode != 0:
        fail("chromium --dump-dom exited with %d:\n%s" % (r.returncode, r.stderr.decode()[-2000:]))
    console = [l for l in r.stderr.decode(errors="replace").splitlines() if ":CONSOLE" in l]
    if console:
        fail("the page logged to the console:\n" + "\n".join(console))
    dom = r.stdout.decode(errors="replace")
    for section in a.sections.split(","):
        if dom.count('<section id="%s">' % section) != 1:
            fail("the rendered page lacks <section id=\"%s\"> (or has it twice)" % section)
    rows = len(re.findall(r'<tr class="op-row">', dom))
    want = expected_rows(plan)
    if rows != want:
        fail("the rendered layout has %d op rows; the plan's %d ops fold into %d"
             % (rows, len(plan["ops"]), want))
    svgs = len(re.findall(r"<svg\b", dom))
    print("dom: %d bytes, %d sections, %d op rows (expected %d), %d svg elements, %.1f s"
          % (len(dom), len(a.sections.split(",")), rows, want, svgs, seconds))

    # 3: the screenshot.
    width, height = (int(v) for v in a.size.split("x"))
    shot = os.path.join(a.work, "screenshot.png")
    if os.path.exists(shot):
        os.remove(shot)
    r, seconds = run_chromium(exe, ["--screenshot=" + shot, "--window-size=%d,%d" % (width, height), url])
    if r.returncode != 0 or not os.path.exists(shot):
        fail("chromium --screenshot failed (%d):\n%s" % (r.returncode, r.stderr.decode()[-2000:]))
    with open(shot, "rb") as f:
        w, h, bpp, pixels = decode_png(f.read())
    if (w, h) != (width, height):
        fail("the screenshot is %dx%d; the window was %dx%d" % (w, h, width, height))
    background = pixels[0][:3]
    colours, other = set(), 0
    for line in pixels:
        for x in range(0, len(line), bpp):
            px = line[x : x + 3]
            if px != background:
                other += 1
            if len(colours) < 64:
                colours.add(px)
    share = other / float(w * h)
    if share < 0.02 or len(colours) < 8:
        fail("the screenshot looks blank: %.2f%% of pixels differ from the background, %d colours"
             % (100 * share, len(colours)))
    print("screenshot: %dx%d, %.1f%% non-background pixels, >= %d colours, %.1f s"
          % (w, h, 100 * share, len(colours), seconds))
    print("check_report: ok")


if __name__ == "__main__":
    main()
