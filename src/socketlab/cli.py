"""`orchestrate`: the command line. It parses arguments and calls library functions, nothing more.

Each subcommand lives in ``socketlab.commands.<name>`` and provides ``register(subparsers)``,
which adds its parser and sets ``func``. Modules are discovered, so adding a command is adding
a file.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys

from socketlab import __version__, commands
from socketlab.errors import SocketlabError

log = logging.getLogger("socketlab")

#: packages of the extras (pyproject.toml), for a one-line error where one is missing
EXTRAS = {
    "boto3": "aws",
    "botocore": "aws",
    "pyarrow": "parquet",
    "llama_cpp": "serve",
    "torch": "ref",
    "transformers": "ref",
    "safetensors": "ref",
}


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; users get the one line that names the mistake."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="orchestrate",
        description="Run declarative experiments on isolated CPU sockets and compare them "
        "with published values.",
    )
    parser.add_argument("--version", action="version", version=f"socketlab {__version__}")
    _add_logging_arguments(parser, argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    # commands that describe the whole command line (completion) read it from their namespace
    parser.set_defaults(root_parser=parser)
    for command in _commands(sub):  # before or after the command: `orchestrate -v run X`
        _add_logging_arguments(command, argparse.SUPPRESS)
    return parser


def _commands(sub: argparse._SubParsersAction) -> list[argparse.ArgumentParser]:
    """Every command's parser, and those of their own actions (`cloud list`)."""
    out = []
    for parser in sub.choices.values():
        out.append(parser)
        for action in parser._actions:  # noqa: SLF001 - argparse has no public view of them
            if isinstance(action, argparse._SubParsersAction):
                out += _commands(action)
    return out


def _add_logging_arguments(parser: argparse.ArgumentParser, default) -> None:
    """-v/-q/--log-file, on the main parser and on every command (SUPPRESS: a command's parser
    leaves what the main parser read alone). A command's own option of the same name stays
    (layer-dump's --quiet: no summary table, and quiet logs)."""
    group = parser.add_argument_group("logging")
    taken = parser._option_string_actions  # noqa: SLF001 - argparse has no public view of it

    def add(*flags: str, **kwargs) -> None:
        free = [f for f in flags if f not in taken]
        if free:
            group.add_argument(*free, default=default, **kwargs)

    add(
        "-v",
        "--verbose",
        action="count",
        help="more detail on stderr (e.g. each SSH connection's settings)",
    )
    add("-q", "--quiet", action="store_true", help="only warnings and errors on stderr")
    add(
        "--log-file",
        metavar="FILE",
        help="also write every log record (debug level, timestamped) to FILE",
    )


def setup_logging(verbose: int = 0, quiet: bool = False, log_file: str | None = None) -> None:
    """The `socketlab` loggers: `orchestrate: message` on stderr at INFO (WARNING with -q,
    DEBUG with -v), and every record with its time and logger in --log-file."""
    log.handlers.clear()
    log.propagate = False
    log.setLevel(logging.DEBUG)
    console = logging.StreamHandler(sys.stderr)
    console.setLevel(logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO)
    console.setFormatter(logging.Formatter("orchestrate: %(message)s"))
    log.addHandler(console)
    if log_file:
        try:
            handler = logging.FileHandler(log_file)
        except OSError as exc:
            raise SocketlabError(
                f"--log-file {log_file}: cannot write it: {exc.strerror}"
            ) from None
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        setup_logging(
            getattr(args, "verbose", 0),
            getattr(args, "quiet", False),
            getattr(args, "log_file", None),
        )
        rc = args.func(args)
    except SocketlabError as exc:
        print(f"orchestrate: error: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:  # a package of an extra the install left out
        missing = (
            exc.name
            if exc.name in EXTRAS
            else next((name for name in EXTRAS if name in str(exc)), None)
        )
        if missing is None:
            raise
        print(
            f"orchestrate: error: {args.command} needs {missing}, which is not installed; "
            f"expected pip install 'socketlab[{EXTRAS[missing]}]'",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("orchestrate: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`orchestrate report X | head`): not an error worth a traceback.
        # Point stdout at devnull so the interpreter's final flush doesn't raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
