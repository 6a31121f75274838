"""socketlab.cloud.follow: what site.yml shows of a running campaign, poll by poll."""

from __future__ import annotations

import json

from socketlab.cloud.follow import follow


def test_new_whole_lines_then_the_end(tmp_path):
    log, offset, results = tmp_path / "run.log", tmp_path / "off", tmp_path / "job"
    results.write_text(json.dumps({"started": True, "finished": False, "ansible_job_id": "1"}))
    assert follow(log, offset, results, 0.2).startswith("(no new progress line in 0.2 s")
    log.write_text("a 1/3 ok\nb 2/3 ok\nc par")  # the last line is still being written
    assert follow(log, offset, results, 0.2) == "a 1/3 ok\nb 2/3 ok"
    with open(log, "a") as fh:
        fh.write("tial\n")
    assert follow(log, offset, results, 0.2) == "c partial"
    results.write_text(json.dumps({"rc": 3, "changed": True}))  # the module's own result
    assert follow(log, offset, results, 30) == "campaign finished: exit 3"  # at once, not 30 s


def test_many_lines_are_cut_to_the_last_forty(tmp_path):
    log, offset, results = tmp_path / "run.log", tmp_path / "off", tmp_path / "job"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    lines = follow(log, offset, results, 0.1).splitlines()
    assert lines[0] == f"... 60 earlier lines in {log}" and lines[-1] == "line 99"
    assert len(lines) == 41
