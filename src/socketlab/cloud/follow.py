"""Follow a campaign that site.yml started as an Ansible async job: print the new lines of its
log over a --wait seconds window (shorter when the job ends), and say when it has finished.

    python -m socketlab.cloud.follow LOG OFFSET_FILE ASYNC_RESULTS_FILE [--wait S]

site.yml calls it once per loop item through a pipe lookup (a debug task shows each item's
output as it comes, which a command task's does not), and stops the loop on "campaign finished".
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

#: at most this many lines per call (the rest are counted), so one poll stays readable
MAX_LINES = 40
FINISHED = "campaign finished"


def job_state(results_file: Path) -> dict | None:
    """The async job's result once it has finished, else None (running or not started)."""
    try:
        data = json.loads(results_file.read_text())
    except (OSError, ValueError):
        return None  # not written yet, or being written
    # async_wrapper writes {"started": true, "finished": false} first, the module's own result
    # (which has neither key) when the command has ended
    if data.get("started") and not data.get("finished"):
        return None
    return data


def follow(log: Path, offset_file: Path, results_file: Path, wait: float) -> str:
    try:
        offset = int(offset_file.read_text())
    except (OSError, ValueError):
        offset = 0
    deadline = time.monotonic() + wait
    while True:
        done = job_state(results_file)
        size = log.stat().st_size if log.exists() else 0
        # the whole window, unless the job ends: site.yml's poll count x window covers `hours`
        if done or time.monotonic() >= deadline:
            break
        time.sleep(0.5)
    text = ""
    if size > offset:
        with open(log, "rb") as fh:
            fh.seek(offset)
            chunk = fh.read(size - offset)
        cut = chunk.rfind(b"\n") + 1 if not done else len(chunk)  # whole lines only
        text = chunk[:cut].decode(errors="replace")
        offset_file.write_text(str(offset + cut))
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        lines = [f"... {len(lines) - MAX_LINES} earlier lines in {log}"] + lines[-MAX_LINES:]
    if done:
        lines.append(f"{FINISHED}: exit {done.get('rc')}")
    elif not lines:
        lines.append(f"(no new progress line in {wait:g} s; full log: {log})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m socketlab.cloud.follow")
    p.add_argument("log", type=Path)
    p.add_argument("offset_file", type=Path)
    p.add_argument("results_file", type=Path)
    p.add_argument("--wait", type=float, default=30.0)
    a = p.parse_args(argv)
    print(follow(a.log, a.offset_file, a.results_file.expanduser(), a.wait))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
