"""Altair charts in notebooks that draw offline, in Jupyter and in an exported HTML page.

altair's own offline renderer (``alt.renderers.enable("html", template="inline")``) makes each
chart output a whole HTML document whose scripts declare top-level ``const``s (``spec``, and
the Vega bundle's own): in a page holding several outputs (``jupyter nbconvert --to html``)
the second chart throws "Identifier 'spec' has already been declared" and only the first one
draws. :func:`enable` registers a renderer whose output is a fragment: the Vega bundle
(vl-convert's, cached by :func:`._html.js_bundle`) evaluated inside a function and only when
no earlier output defined ``vegaEmbed``, then the chart embedded inside a function of its own,
with the spec as script-safe JSON. Nothing is fetched from a network.
"""

from __future__ import annotations

import uuid
from typing import Any

import altair as alt

from ._html import js_bundle, script_json, vl_version

RENDERER = "rivumi-offline"


def offline_html(spec: dict[str, Any]) -> str:
    """One chart as an HTML fragment that draws offline beside any other such fragment.

    >>> html = offline_html({"mark": "point", "data": {"values": [{"a": "</script>"}]}})
    >>> html.count("<script"), "</script>\\"" in html, "const spec" in html
    (2, False, False)
    """
    div = f"rivumi-vl-{uuid.uuid4().hex}"
    return (f'<div id="{div}" class="rivumi-vega-chart"></div>\n'
            '<script type="text/javascript">\n'
            'if (typeof window.vegaEmbed === "undefined") { (function () {\n'
            f"{js_bundle(vl_version())}\n"
            "}).call(window); }\n"
            "</script>\n"
            '<script type="text/javascript">\n'
            "(function () {\n"
            f"  var el = document.getElementById({script_json(div)});\n"
            f"  vegaEmbed(el, {script_json(spec)}, {{mode: 'vega-lite'}})\n"
            "    .then(function () { el.setAttribute('data-rendered', '1'); })\n"
            "    .catch(function (e) { el.setAttribute('data-rendered', 'error');\n"
            "                          el.textContent = 'chart failed to render: ' + e; });\n"
            "})();\n"
            "</script>")


def _render(spec: dict[str, Any], **_metadata: Any) -> dict[str, str]:
    return {"text/html": offline_html(spec)}


def enable() -> None:
    """Draw every altair chart of this kernel offline (notebooks call it once, at the top).

    Also lifts altair's 5,000-row guard: the chart builders reduce the data in polars first.
    """
    alt.renderers.register(RENDERER, _render)
    alt.renderers.enable(RENDERER)
    alt.data_transformers.disable_max_rows()
