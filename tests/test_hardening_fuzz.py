"""Issue 15, fuzz: random and adversarial specs and published files, mutated from the shipped
ones (byte flips, truncation, deep nesting, aliases, huge numbers, NaN, NUL, wrong types,
template bombs), through the loaders and the planner. Every case must end in a result or a
one-line user error (SocketlabError), within 5 s of CPU and 512 MiB.

All cases run in one child process (not a process per case: CI time matters); the child
enforces the bounds itself: RLIMIT_AS (512 MiB above what it holds after its imports), 5 s of
the process's CPU per case (ITIMER_PROF: a blow-up is CPU; wall time on a shared 2-vCPU machine
is not: CI saw a 0.77-s case pass 5 s of wall time while other work ran) and 60 s of wall
time per case (a case that blocks). The seed is printed; ``SOCKETLAB_FUZZ_SEED=<n>`` replays a run
and
``SOCKETLAB_FUZZ_CASES=<n>`` sets its size.

    .venv/bin/python -m tests.test_hardening_fuzz --seed 1 --cases 200   # by hand
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASE_S = 5  #: CPU seconds per case
CASE_WALL_S = 60  #: wall seconds per case
CASE_MIB = 512

SPEC_SEEDS = sorted(
    [
        *ROOT.glob("experiments/*.yaml"),
        *ROOT.glob("tests/specs/good/*.yaml"),
        *ROOT.glob("tests/specs/bad/*.yaml"),
    ]
)
PUBLISHED_SEEDS = sorted(
    [
        *ROOT.glob("experiments/published/*.yaml"),
        *ROOT.glob("tests/published/*.yaml"),
        *ROOT.glob("tests/published/bad/*.yaml"),
    ]
)

BOMBS = [
    "{{ 'x' * 1000000000 }}",
    "{{ 10 ** 100000000 }}",
    "{{ '%0999999999d' % 1 }}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{{ 'ab'.center(2000000000) }}",
    "{{ '{:>999999999}'.format(1) }}",
    "{{ range(10**9) }}",
    "{{ 'a'|indent(10**9) }}",
    "{{ ('x'*100000)|wordwrap(1) }}",
    "{{ [1]*10**9 }}",
    "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "{{ ''.__class__ }}",
    "{{ cycler }}",
    "{{ '0-4000000000' | cpus }}",
    "{{ facts.workers | cpulist }}",
]
VALUES = [
    "1e308",
    "1.0e+400",
    "-1",
    "0",
    ".nan",
    ".inf",
    "-.inf",
    "9" * 5000,
    "[]",
    "{}",
    "[[[[[[]]]]]]",
    "null",
    "yes",
    '"a\\0b"',
    "!!binary aGk=",
    "2026-02-30",
    "*nope",
    "&a [*a]",
    "? [a, b]",
    '"\\x01"',
    "0-4000000000",
    "1000000000",
    "'{{ 1 }}'",
]


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One or a few mutations of ``data``."""
    for _ in range(rng.choice((1, 1, 2, 3))):
        data = rng.choice(MUTATORS)(rng, data)
    return data


def _flip(rng, data):
    if not data:
        return data
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b)


def _insert(rng, data):
    at = rng.randrange(len(data) + 1)
    junk = rng.choice(
        [
            b"\x00",
            b"\xff\xfe",
            b"\x1b[",
            b"\t",
            b"\r",
            b"'",
            b'"',
            b"{",
            b"[",
            b": ",
            b"- ",
            b"&a ",
            b"*a",
            b"!!",
            b"%YAML 1.1\n",
            b"---\n",
            b"?",
        ]
    )
    return data[:at] + junk + data[at:]


def _truncate(rng, data):
    return data[: rng.randrange(len(data) + 1)]


def _duplicate(rng, data):
    if not data:
        return data
    a = rng.randrange(len(data))
    b = min(len(data), a + rng.randint(1, 400))
    return data[:b] + data[a:b] * rng.randint(1, 20) + data[b:]


def _nest(rng, data):
    depth = rng.choice((10, 70, 1000, 5000))
    kind = rng.choice(("[", "{a: "))
    close = "]" if kind == "[" else "}"
    return data + f"\nnest: {kind * depth}1{close * depth}\n".encode()


def _aliases(rng, data):
    width, depth = rng.randint(2, 12), rng.randint(2, 9)
    text = "\nb0: &b0 [x]\n" + "".join(
        f"b{i}: &b{i} [{', '.join([f'*b{i - 1}'] * width)}]\n" for i in range(1, depth)
    )
    return data + text.encode()


_SCALAR = re.compile(rb"(:\s+)([^\s{}\[\],#][^\n{}\[\],#]*)")


def _value(rng, data):
    """A value after a key replaced by a huge, non-finite, wrong-typed or tricky one."""
    spots = list(_SCALAR.finditer(data))
    if not spots:
        return data
    m = rng.choice(spots)
    new = rng.choice(VALUES + [json.dumps(b) for b in BOMBS]).encode()
    return data[: m.start(2)] + new + data[m.end(2) :]


def _key(rng, data):
    lines = data.split(b"\n")
    i = rng.randrange(len(lines))
    key = rng.choice([b"yes", b"1", b"null", b"? [a, b]", b"2026-01-01", b'"a\\0"', b"on"])
    lines[i] = re.sub(rb"^(\s*(?:- )?)[A-Za-z_][\w.-]*(?=:)", lambda m: m.group(1) + key, lines[i])
    return b"\n".join(lines)


def _template(rng, data):
    spots = [m for m in re.finditer(rb"\{\{[^}\n]*\}\}", data)]
    bomb = rng.choice(BOMBS).encode()
    if not spots:
        return data.replace(
            b"command: ", b"command: " + json.dumps(bomb.decode()).encode() + b" #", 1
        )
    m = rng.choice(spots)
    return data[: m.start()] + bomb + data[m.end() :]


def _sweep(rng, data):
    axes = "".join(
        f"        a{i}: [{', '.join(str(j) for j in range(rng.randint(5, 30)))}]\n"
        for i in range(rng.randint(2, 7))
    )
    text = (
        '\n  - name: fuzz_sweep\n    command: "echo {{ a0 }}"\n'
        f"    repetitions: {rng.choice((1, 100, 10**6))}\n    sweep:\n      matrix:\n{axes}"
    )
    return data.replace(b"\nexperiments:", b"\nexperiments:" + text.encode(), 1)


MUTATORS = [
    _flip,
    _insert,
    _truncate,
    _duplicate,
    _nest,
    _aliases,
    _value,
    _value,
    _key,
    _template,
    _template,
    _sweep,
]


# -- the child: one process, every case, the bounds enforced here ----------------------------


class CaseTimeout(BaseException):  # not an Exception: no handler in the code under test eats it
    pass


def _run_cases(seed: int, cases: int, workdir: Path) -> int:
    import resource
    import signal

    from socketlab.errors import SocketlabError
    from socketlab.report.published import load_published
    from socketlab.spec.expand import expand_points
    from socketlab.spec.load import load_spec

    facts = _host_facts()
    held = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    cap = held + CASE_MIB * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    def expired(*_):
        raise CaseTimeout()

    signal.signal(signal.SIGALRM, expired)
    signal.signal(signal.SIGPROF, expired)
    rng = random.Random(seed)
    seeds = {
        "spec": [p.read_bytes() for p in SPEC_SEEDS],
        "published": [p.read_bytes() for p in PUBLISHED_SEEDS],
    }
    counts = {"result": 0, "user error": 0}
    slowest = 0.0
    for n in range(cases):
        kind = "spec" if n % 3 else "published"
        data = mutate(rng, rng.choice(seeds[kind]))
        path = workdir / f"case-{n}.yaml"
        path.write_bytes(data)
        t0 = time.perf_counter()
        signal.alarm(CASE_WALL_S)
        signal.setitimer(signal.ITIMER_PROF, CASE_S)
        try:
            if kind == "spec":
                spec = load_spec(path)
                expand_points(spec, facts)
            else:
                load_published(path)
            counts["result"] += 1
        except SocketlabError as exc:
            text = str(exc)
            if "\n" in text or not text:
                return _fail(seed, n, path, f"user error not one line: {text!r}")
            counts["user error"] += 1
        except CaseTimeout:
            return _fail(
                seed,
                n,
                path,
                f"no answer within {CASE_S} s of CPU "
                f"({time.perf_counter() - t0:.1f} s of wall time)",
            )
        except MemoryError:
            return _fail(seed, n, path, f"more than {CASE_MIB} MiB")
        except BaseException as exc:  # noqa: BLE001 - any other exception is the bug we hunt
            import traceback

            traceback.print_exc()
            return _fail(seed, n, path, f"{type(exc).__name__}: {exc}"[:300])
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.alarm(0)
        slowest = max(slowest, time.perf_counter() - t0)
        path.unlink()
    print(json.dumps({"seed": seed, "cases": cases, **counts, "slowest_s": round(slowest, 3)}))
    return 0


def _fail(seed: int, n: int, path: Path, why: str) -> int:
    print(f"FUZZ FAILURE seed={seed} case={n} ({path}): {why}", flush=True)
    return 1


def _host_facts() -> dict:
    from socketlab.spec.hosts import assumed_host_facts
    from socketlab.spec.model import Spec

    fixture = ROOT / "tests" / "fixtures" / "topology" / "c8i-metal-48xl.json"
    spec = Spec(
        path=Path("fuzz.yaml"),
        sha256="",
        campaign="fuzz",
        description="",
        hosts=None,
        isolation={},
        requires=None,
        builds={},
        lines={},
    )
    return assumed_host_facts(spec, [f"fuzzhost={fixture}"])


# -- the test ----------------------------------------------------------------------------------


def test_fuzz_loaders_and_planner(tmp_path):
    seed = int(os.environ.get("SOCKETLAB_FUZZ_SEED") or time.time_ns() % 2**32)
    cases = int(os.environ.get("SOCKETLAB_FUZZ_CASES") or 2000)
    print(f"fuzz seed {seed} ({cases} cases; replay: SOCKETLAB_FUZZ_SEED={seed})")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.test_hardening_fuzz",
            "--seed",
            str(seed),
            "--cases",
            str(cases),
            "--dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600 + cases * CASE_S,
    )
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    assert proc.returncode == 0, f"seed {seed}: {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["cases"] == cases >= 2000 or "SOCKETLAB_FUZZ_CASES" in os.environ
    assert summary["result"] + summary["user error"] == cases


def _main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--dir", default="/tmp")
    args = parser.parse_args()
    return _run_cases(args.seed, args.cases, Path(args.dir))


if __name__ == "__main__":
    sys.exit(_main())
