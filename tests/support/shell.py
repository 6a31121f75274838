"""Shell-injection bait: an argument that does harm if any shell ever parses it.

The executors and the runner promise that argv reaches execve() as is; these tests pass the bait
as one argument and check that it arrived literally and that nothing happened.
"""

from __future__ import annotations

from pathlib import Path


def shell_bait(tmp_path: Path) -> tuple[Path, str]:
    """(keep, evil): a folder to keep and an argument that, run by any shell, would create
    tmp_path/pwned and tmp_path/out and remove keep. ``bait_untouched`` checks it never was."""
    keep = tmp_path / "keep"
    keep.mkdir()
    return keep, f"$(touch {tmp_path}/pwned); rm -rf {keep}; echo `id` | cat > {tmp_path}/out &"


def bait_untouched(tmp_path: Path, keep: Path) -> bool:
    return keep.is_dir() and not (tmp_path / "pwned").exists() and not (tmp_path / "out").exists()
