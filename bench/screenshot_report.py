#!/usr/bin/env python3
"""Open a report's HTML in headless Chromium and save a screenshot (PNG).

    python bench/screenshot_report.py results/campaign-oct/report.html docs/report-screenshot.png

Chromium runs with a throwaway profile, no network services, and a hard timeout; the process is
started and waited for by its PID only.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


def chromium() -> str | None:
    for c in CANDIDATES:
        if Path(c).exists():
            return c
    return shutil.which("chromium") or shutil.which("google-chrome")


def screenshot(html: Path, png: Path, size: str = "1400,2400", timeout: float = 90) -> None:
    exe = chromium()
    if exe is None:
        raise RuntimeError("no chromium found (apt-get install chromium)")
    png.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="socketlab-chromium-") as profile:
        argv = [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--screenshot={png.resolve()}",
            f"--window-size={size}",
            html.resolve().as_uri(),
        ]
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()  # by its PID, never by name
            proc.communicate()
            raise RuntimeError(f"chromium did not finish in {timeout:g} s") from None
    if not png.exists() or png.stat().st_size == 0:
        raise RuntimeError(
            f"chromium wrote no screenshot (exit {proc.returncode}): "
            f"{err.decode(errors='replace').strip()[-300:]}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("html", type=Path)
    ap.add_argument("png", type=Path)
    ap.add_argument("--size", default="1400,2400", help="window WIDTH,HEIGHT (default 1400,2400)")
    args = ap.parse_args(argv)
    try:
        screenshot(args.html, args.png, args.size)
    except RuntimeError as exc:
        print(f"screenshot_report: {exc}", file=sys.stderr)
        return 1
    print(args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
