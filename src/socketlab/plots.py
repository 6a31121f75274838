"""Figures as embedded PNG (matplotlib's Agg backend, so no display is needed): the HTML of
`orchestrate compare` and `orchestrate serving-report --format html` holds them as data URIs."""

from __future__ import annotations

import base64
import io
from typing import Any


def figure(width: float, height: float) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height), dpi=110)


def png_base64(fig: Any) -> str:
    """The figure as base64 PNG text for an <img src="data:image/png;base64,..."> (closed)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def template_env(package: str, html: bool) -> Any:
    """Jinja for ``<package>/templates`` (markdown escapes '|', HTML autoescapes)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader(package, "templates"),
        autoescape=html,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["md"] = lambda text: str(text).replace("|", "\\|")
    return env
