"""HTML pieces shared by the fleet report and the run pages: escaping, the inlined Vega
bundle, chart specs as JSON, the page shell (CSS and the script that renders every chart).

Private to :mod:`rivumi_analysis.viz`; nothing here reads runs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import html as _html
import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import altair as alt

from .._version import __version__


def _norm(p: str) -> str:
    # run_dir is the resolved source joined with the path below it (discovery), so the
    # given PATH is resolved the same way before comparing
    return os.path.realpath(p)


def relative_run_dir(run_dir: str | None, sources: Sequence[str]) -> str | None:
    """``run_dir`` relative to the given PATH it lies under (the PATH's own name when it *is*
    the run). Never returns an absolute path.

    >>> relative_run_dir("/x/runs/abc", ["/x/runs"])
    'abc'
    >>> relative_run_dir("/x/runs/abc", ["/x/runs/abc"])
    'abc'
    >>> relative_run_dir("/elsewhere/r", ["/x"])
    'r'
    """
    if run_dir is None:
        return None
    rd = _norm(run_dir)
    best: str | None = None
    for s in sources:
        sn = _norm(s)
        if rd == sn:
            cand = os.path.basename(sn) or "."
        elif rd.startswith(sn.rstrip(os.sep) + os.sep):
            cand = os.path.relpath(rd, sn)
        else:
            continue
        if best is None or len(cand) < len(best):
            best = cand
    return best if best is not None else os.path.basename(rd)


_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
# bidi controls, C0/C1 controls other than tab and newline, the line and paragraph separators
# and lone surrogates: run text shows each as a marker instead of obeying it (a bidi override
# must not reorder what the reader sees; a lone surrogate cannot even be written as UTF-8)
_CONTROL = re.compile("[" + _BIDI + "\u0000-\u0008\u000b-\u001f\u007f-\u009f"
                      "\u2028\u2029\ud800-\udfff]")


def visible(text: str) -> str:
    """``text`` with bidi controls, control characters and lone surrogates replaced by a
    visible marker ``⟦U+XXXX⟧`` (a carriage return before a newline is dropped).

    >>> visible("abc\\u202edef\\r\\n\\ud800")
    'abc⟦U+202E⟧def\\n⟦U+D800⟧'
    """
    text = text.replace("\r\n", "\n")
    return _CONTROL.sub(lambda m: f"⟦U+{ord(m.group()):04X}⟧", text)


def e(v: Any) -> str:
    """``v`` for HTML text or a quoted attribute: escaped, controls made :func:`visible`.

    >>> e('<img src=x onerror="a()">\\u202e'), e(1234.56), e(None)
    ('&lt;img src=x onerror=&quot;a()&quot;&gt;⟦U+202E⟧', '1,234.6', '')
    """
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, list):
        return ", ".join(e(x) for x in v)
    return _html.escape(visible(str(v)), quote=True)


def reason_text(code: str) -> str:
    from ..errors import describe

    try:
        return describe(code)
    except KeyError:
        return ""


@functools.lru_cache(maxsize=4)
def js_bundle(vl_version: str | None) -> str:
    """Vega, Vega-Lite and vega-embed as one script (vl-convert's bundle).

    Bundling takes 4-9 s on a busy 2-core machine, once per process; the result depends only
    on the vl-convert and Vega-Lite versions, so it is kept in the user cache directory
    (``vega-bundle-<vl-convert>-<vega-lite>.js``, with its sha256 on the first line, checked
    on every read). A cache that cannot be read or written only costs the bundling time.
    """
    import vl_convert as vlc

    from ..read.incremental import default_cache_dir

    path = os.path.join(default_cache_dir(),
                        f"vega-bundle-{vlc.__version__}-{vl_version or 'default'}.js")
    with contextlib.suppress(OSError, ValueError):
        with open(path, encoding="utf-8") as fh:
            head, _, text = fh.read().partition("\n")
        if head == "// sha256:" + hashlib.sha256(text.encode()).hexdigest():
            return text
    text = vlc.javascript_bundle(vl_version=vl_version)
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(f"// sha256:{hashlib.sha256(text.encode()).hexdigest()}\n{text}")
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return text


def vl_version() -> str | None:
    import vl_convert as vlc

    want = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    return want if want in vlc.get_vegalite_versions() else None


def quiet() -> Any:
    """A context without altair's per-construction JSON-schema validation (its "debug mode").

    Building a report's charts validated every derived chart with its inline data again and
    again (seconds at 2,000 runs); the specs are still whole Vega-Lite (the builders' unit
    tests call the validating ``to_dict()``).
    """
    from altair.utils.schemapi import debug_mode

    return debug_mode(False)


def spec(chart: Any) -> dict[str, Any]:
    """The chart's Vega-Lite dict as the page embeds it (not validated again: see
    :func:`quiet`)."""
    with quiet():
        d = chart.to_dict(validate=False)
    d.pop("$schema", None)  # not needed offline: mode is passed to vega-embed explicitly
    d.setdefault("config", {}).update({"font": "system-ui, sans-serif",
                                       "view": {"stroke": "#ddd"}})
    return d


_SURROGATE = re.compile("[\ud800-\udfff]")
_SHOWN = re.compile("[" + _BIDI + "\u007f-\u009f]")


def script_json(obj: Any) -> str:
    """``obj`` as JSON safe inside ``<script>``: ``<``, ``>`` and ``&`` as escapes (no
    ``</script>`` or ``<!--`` can close or change the element), the line separators and lone
    surrogates too (the file stays valid UTF-8; JSON strings may hold such escapes). Bidi
    and C1 control characters become the :func:`visible` marker: a chart draws them as text
    instead of reordering its labels.

    >>> script_json({"a": "</script>\\ud800"})
    '{"a":"\\\\u003c/script\\\\u003e\\\\ud800"}'
    """
    text = _SHOWN.sub(lambda m: f"⟦U+{ord(m.group()):04X}⟧",
                      json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", (
        text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")))


CSS = """
:root{--fg:#1d2330;--muted:#5b6473;--line:#e3e6eb;--bg:#f7f8fa;--accent:#2457c5}
*{box-sizing:border-box}body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",
Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{background:#1d2330;color:#fff;padding:18px 28px}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;color:#c9cfda;font-size:13px}
main{max-width:1320px;margin:0 auto;padding:18px 28px 60px}
nav{margin:8px 0 16px;display:flex;flex-wrap:wrap;gap:6px}nav a{color:var(--accent);
text-decoration:none;background:#fff;border:1px solid var(--line);border-radius:14px;
padding:3px 10px;font-size:13px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:6px 0 18px}.card{background:#fff;
border:1px solid var(--line);border-radius:8px;padding:10px 14px;min-width:130px}
.card b{display:block;font-size:20px}.card span{color:var(--muted);font-size:12px}
section{background:#fff;border:1px solid var(--line);border-radius:8px;padding:14px 18px;
margin:0 0 18px}section h2{margin:0 0 4px;font-size:17px}
section p.what{margin:0 0 10px;color:var(--muted);max-width:980px}
.vega-chart{overflow-x:auto;min-height:60px}
.chart-error{color:#b00020;font-weight:600}
.runhead{display:flex;flex-wrap:wrap;gap:18px}.runhead>*{flex:1 1 380px;min-width:0}
table.kv th{width:190px;position:static;cursor:default;background:#f7f8fa}
ul.codes{margin:4px 0;padding-left:18px}ul.runindex{columns:2;margin:4px 0}
.two{display:flex;flex-wrap:wrap;gap:18px}.two>*{flex:1 1 420px;min-width:0}
p.diverge{font-size:15px;border-left:4px solid #6a1b9a;padding:6px 10px;background:#f6f0fa}
tr.differs th,tr.differs td{background:#fff4e5}section.runpage{border-top:3px solid #1d2330}
section h3{font-size:15px;margin:14px 0 4px}
table{border-collapse:collapse;width:100%;font-size:12.5px}th,td{border-bottom:1px solid
var(--line);padding:4px 6px;text-align:left;vertical-align:top}th{position:sticky;top:0;
background:#f0f2f5;cursor:pointer;user-select:none}td.num{text-align:right;
font-variant-numeric:tabular-nums}
.tablewrap{max-height:560px;overflow:auto;border:1px solid var(--line);border-radius:6px}
.v{display:inline-block;padding:1px 7px;border-radius:9px;color:#fff;font-size:11.5px}
code{font-size:12px;background:#f0f2f5;padding:0 4px;border-radius:3px}
input.filter{margin:0 0 8px;padding:5px 8px;width:320px;border:1px solid var(--line);
border-radius:6px}.muted{color:var(--muted)}footer{color:var(--muted);font-size:12px}
"""

TRANSCRIPT_CSS = """
.tx{margin:0;padding:0}.tx-list{border-left:2px solid var(--line,#e3e6eb);margin:8px 0 0 6px;
padding:0 8px 0 12px;max-height:85vh;overflow:auto}.tx-e{position:relative;margin:0 0 8px;padding:6px 10px;border:1px solid
#e3e6eb;border-radius:6px;background:#fff;content-visibility:auto;contain-intrinsic-size:auto 60px}
.tx-e.tx-ok{border-left:4px solid #2e7d32}.tx-e.tx-error{border-left:4px solid #c62828}
.tx-e.tx-warn{border-left:4px solid #ef6c00}.tx-e.tx-hit{outline:3px solid #2457c5;
outline-offset:1px}.tx-h{display:flex;flex-wrap:wrap;gap:8px;align-items:baseline}
.tx-k{font-size:11px;text-transform:uppercase;letter-spacing:.04em;color:#fff;background:#5b6473;
border-radius:8px;padding:0 6px}.tx-k.k-model{background:#2457c5}.tx-k.k-tool{background:#00796b}
.tx-k.k-user,.tx-k.k-system,.tx-k.k-context{background:#6a1b9a}.tx-k.k-quarantine{background:#c62828}
.tx-k.k-check{background:#8d6e00}.tx-k.k-approval{background:#ef6c00}.tx-t{font-weight:600;
overflow-wrap:anywhere;unicode-bidi:isolate}.tx-pos{margin-left:auto;color:#5b6473;font-size:12px;
font-variant-numeric:tabular-nums;white-space:nowrap}.tx-bar{display:inline-block;width:60px;
height:6px;background:#e3e6eb;border-radius:3px;position:relative;vertical-align:middle}
.tx-bar i{position:absolute;top:-2px;width:3px;height:10px;background:#2457c5}
.tx-f{display:flex;flex-wrap:wrap;gap:2px 14px;margin:4px 0 0;font-size:12.5px}
.tx-f div{display:flex;gap:5px;min-width:0}.tx-f dt{color:#5b6473}.tx-f dd{margin:0;
overflow-wrap:anywhere;unicode-bidi:isolate;min-width:0}.tx-x{margin:4px 0 0}.tx-x summary{cursor:pointer;color:#2457c5;font-size:12.5px}
.tx-x pre,.tx-p{white-space:pre-wrap;overflow-wrap:anywhere;max-height:480px;overflow:auto;
background:#f7f8fa;border:1px solid #e3e6eb;border-radius:4px;padding:6px 8px;margin:4px 0 0;
font-size:12px;unicode-bidi:isolate}.tx-turn{font-weight:700;margin:10px 0 6px;
background:#fff;display:inline-block;padding:0 8px;border:1px solid #1d2330;border-radius:10px}
.tx-note{color:#5b6473;font-size:12.5px}.tx-bar[data-chart]{cursor:pointer}
.tx-mark{position:absolute;border:3px solid #2457c5;border-radius:3px;pointer-events:none;
z-index:8;box-shadow:0 0 0 2px #fff}.tx-lab{color:#5b6473;font-size:12px}
"""
"""The transcript's styles (the same on a run page and in a notebook)."""

JS = r"""
(function(){
  var specs = JSON.parse(document.getElementById('rivumi-specs').textContent);
  var opts = {mode:'vega-lite', renderer:'svg',
              actions:{export:true, source:false, compiled:false, editor:false},
              tooltip:{theme:'light'}};
  var pending = [], views = [], focus = null;
  // Linked selection: a click on any mark of a run (a datum with run_id) follows that run in
  // every chart that declares the focus_run parameter and filters the audit table; a click
  // on the same run or on an empty spot clears it.
  function runOf(item){
    var d = item && item.datum;
    if (!d) return null;
    return d.run_id || (d.datum && d.datum.run_id) || null;
  }
  function setFocus(id){
    focus = (id && id !== focus) ? id : null;
    views.forEach(function(v){ try { v.signal('focus_run', focus); v.runAsync(); } catch(e) {} });
    var inp = document.querySelector('input.filter[data-table="audit-table"]');
    if (inp) { inp.value = focus || ''; inp.dispatchEvent(new Event('input')); }
    var bar = document.getElementById('focus-bar');
    if (!bar) {
      bar = document.createElement('div'); bar.id = 'focus-bar';
      bar.style.cssText = 'position:fixed;bottom:0;left:0;right:0;padding:6px 12px;' +
        'background:#fff8e1;border-top:1px solid #e0c060;font-size:13px;z-index:9';
      document.body.appendChild(bar);
      bar.addEventListener('click', function(){ setFocus(null); });
    }
    bar.style.display = focus ? '' : 'none';
    bar.textContent = focus ? 'Following run ' + focus + ' in every chart and the audit ' +
      'table (click here, an empty spot or the run again to clear)' : '';
  }
  function toEntry(sec, seq){
    var hit = sec.querySelector('.tx-e[data-seqs~="' + Number(seq) + '"]');
    var old = document.querySelectorAll('.tx-hit');
    Array.prototype.forEach.call(old, function(x){ x.classList.remove('tx-hit'); });
    if (!hit) {
      var cut = sec.querySelector('.tx-cut-hit') || sec.querySelector('[id$="-tx-cut"]');
      if (cut) { cut.scrollIntoView({block:'center'}); return true; }
      return false;
    }
    hit.classList.add('tx-hit');
    hit.scrollIntoView({block:'center'});
    return true;
  }
  // an entry's place on the timeline: a click on its bar scrolls back to the run's timeline
  // and outlines the entry's segments there (found in Vega's scenegraph by their sequence)
  function walk(mark, ox, oy, fn){
    if (!mark || !mark.items) return;
    mark.items.forEach(function(it){
      fn(it, ox, oy);
      if (mark.marktype === 'group' && it.items) it.items.forEach(function(m){
        walk(m, ox + (it.x || 0), oy + (it.y || 0), fn);
      });
    });
  }
  function outline(chart, seqs){
    var view = chart.__rivumiView, svg = chart.querySelector('svg');
    var old = document.getElementById('tx-mark');
    if (old) old.remove();
    if (!view || !svg) return false;
    var box = null;
    walk(view.scenegraph().root, 0, 0, function(it, ox, oy){
      var d = it.datum, b = it.bounds;
      if (!d || !b || d.seq == null || seqs.indexOf(Number(d.seq)) < 0 || b.empty()) return;
      var r = {x1: ox + b.x1, x2: ox + b.x2, y1: oy + b.y1, y2: oy + b.y2};
      box = box ? {x1: Math.min(box.x1, r.x1), x2: Math.max(box.x2, r.x2),
                   y1: Math.min(box.y1, r.y1), y2: Math.max(box.y2, r.y2)} : r;
    });
    if (!box) return false;
    var o = view.origin(), rect = svg.getBoundingClientRect(), m = document.createElement('div');
    m.id = 'tx-mark'; m.className = 'tx-mark';
    m.style.left = (rect.left + window.scrollX + o[0] + box.x1 - 3) + 'px';
    m.style.top = (rect.top + window.scrollY + o[1] + box.y1 - 3) + 'px';
    m.style.width = (box.x2 - box.x1 + 6) + 'px';
    m.style.height = (box.y2 - box.y1 + 6) + 'px';
    document.body.appendChild(m);
    return true;
  }
  document.addEventListener('click', function(ev){
    var bar = ev.target.closest && ev.target.closest('.tx-bar[data-chart]');
    if (!bar) return;
    var chart = document.getElementById(bar.getAttribute('data-chart'));
    if (!chart) return;
    chart.scrollIntoView({block:'center'});
    var entry = bar.closest('.tx-e'), seqs = (entry.getAttribute('data-seqs') || '')
      .split(' ').filter(Boolean).map(Number);
    chart.setAttribute('data-outlined', outline(chart, seqs) ? '1' : '0');
  });
  Object.keys(specs).forEach(function(key){
    var el = document.getElementById('chart-' + key);
    pending.push(vegaEmbed(el, specs[key], opts).then(function(res){
      views.push(res.view);
      var runSec = el.closest('section.runpage');
      el.__rivumiView = res.view;
      res.view.addEventListener('click', function(ev, item){
        // on a run page, a segment or tick lands on its transcript entry
        var d = item && item.datum, seq = d && (d.seq != null ? d.seq : d.sequence);
        if (runSec && seq != null && toEntry(runSec, seq)) return;
        var id = runOf(item);
        if (id) setFocus(id); else if (!item && focus) setFocus(null);
      });
      el.setAttribute('data-rendered', '1');
    }).catch(function(err){
      el.setAttribute('data-rendered', 'error');
      el.innerHTML = '<p class="chart-error">chart failed to render</p>';
      console.error('rivumi chart ' + key + ': ' + err);
    }));
  });
  Promise.all(pending).then(function(){ document.body.setAttribute('data-charts-done','1'); });
  document.querySelectorAll('input.filter[data-table]').forEach(function(inp){
    var tbody = document.getElementById(inp.getAttribute('data-table')).tBodies[0];
    inp.addEventListener('input', function(){
      var q = inp.value.toLowerCase();
      Array.prototype.forEach.call(tbody.rows, function(tr){
        tr.style.display = tr.textContent.toLowerCase().indexOf(q) >= 0 ? '' : 'none';
      });
    });
  });
  // the transcript's filter: entries whose text (folded texts included) holds the query
  document.querySelectorAll('input.tx-filter').forEach(function(inp){
    var list = document.getElementById(inp.getAttribute('data-list'));
    inp.addEventListener('input', function(){
      var q = inp.value.toLowerCase();
      Array.prototype.forEach.call(list.children, function(el){
        if (!el.classList.contains('tx-e')) return;
        el.style.display = !q || el.textContent.toLowerCase().indexOf(q) >= 0 ? '' : 'none';
      });
    });
  });
  document.querySelectorAll('th[data-col]').forEach(function(th){
    th.addEventListener('click', function(){
      var table = th.closest('table'), tb = table.tBodies[0], i = th.cellIndex;
      var asc = th.getAttribute('data-asc') !== '1'; th.setAttribute('data-asc', asc?'1':'0');
      var rows = Array.prototype.slice.call(tb.rows);
      rows.sort(function(a,b){
        var x=a.cells[i].getAttribute('data-v')||a.cells[i].textContent,
            y=b.cells[i].getAttribute('data-v')||b.cells[i].textContent;
        var nx=Number(x.replace(/,/g,'')), ny=Number(y.replace(/,/g,''));
        var c = (x!==''&&y!==''&&!isNaN(nx)&&!isNaN(ny)) ? nx-ny : x.localeCompare(y);
        return asc ? c : -c;
      });
      rows.forEach(function(r){ tb.appendChild(r); });
    });
  });
})();
"""



def page(title: str, subtitle: str, body: str, charts: Mapping[str, Any], *,
         redact: bool = False, generated: datetime | None = None,
         specs: Mapping[str, Any] | None = None) -> str:
    """A whole self-contained page: header, ``body`` and every chart of ``charts`` rendered
    into its ``<div class="vega-chart" id="chart-KEY">`` (``specs`` when already built)."""
    specs = dict(specs) if specs is not None else {k: spec(c) for k, c in charts.items()}
    gen = (generated or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    red = " · redacted (allowlist only)" if redact else ""
    bundle = js_bundle(vl_version())
    css = page_css()
    embed_css, tooltip_css = vega_styles(bundle)
    styles = [css] + [x for x in (embed_css, tooltip_css) if x is not None]
    pre = ((f'<style id="vega-embed-style">{embed_css}</style>' if embed_css else "")
           + (f'<style id="vega-tooltip-style">{tooltip_css}</style>' if tooltip_css else ""))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="{csp([bundle, JS], styles)}">
<title>{e(title)}</title><style>{css}</style>{pre}</head>
<body data-charts="{len(specs)}">
<header><h1>{e(title)}</h1>
<p>{e(subtitle)} · generated {gen} by rivumi-analysis {__version__}{red}</p>
</header><main>
{body}
</main>
<script>{bundle}</script>
<script type="application/json" id="rivumi-specs">{script_json(specs)}</script>
<script>{JS}</script>
</body></html>
"""


def _sha(text: str) -> str:
    import base64

    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def csp(scripts: Sequence[str], styles: Sequence[str]) -> str:
    """The page's Content-Security-Policy: nothing from anywhere (``default-src 'none'``),
    no ``<base>``, no form; only the page's own inline scripts and ``<style>`` elements, by
    their sha256. Run text is escaped, so a ``<script>`` or an event handler written by a
    run could never match a hash and never runs.

    ``'unsafe-eval'``: Vega compiles its expressions with ``Function`` (the only code it
    makes is from the chart specs, which carry no run text as code). ``style-src-attr
    'unsafe-inline'``: Vega's SVG and the verdict badges set style attributes (a style
    attribute runs no script; with ``default-src 'none'`` it loads nothing).

    >>> csp(["a"], ["b"]).split("; ")[1]
    "script-src 'sha256-ypeBEsobvcr6wjGzmiPcTaeG7/gUfE5yuYB3ha/uSLs=' 'unsafe-eval'"
    """
    s = " ".join(dict.fromkeys(_sha(x) for x in scripts))
    st = " ".join(dict.fromkeys(_sha(x) for x in styles))
    return (f"default-src 'none'; script-src {s} 'unsafe-eval'; style-src {st}; "
            f"style-src-elem {st}; style-src-attr 'unsafe-inline'; img-src data: blob:; "
            "base-uri 'none'; form-action 'none'")


def page_css() -> str:
    """The page's one stylesheet: :data:`CSS`, the verdict colours and the transcript's."""
    from . import charts as C

    colors = "".join(f".v-{k}{{background:{c}}}" for k, c in C.VERDICT_COLORS.items())
    return (CSS + colors + ".v{background:#555}td.n{text-align:right;"
            "font-variant-numeric:tabular-nums}" + TRANSCRIPT_CSS)


def _js_string(src: str, start: int) -> str | None:
    """The JS string literal starting at ``src[start]`` (a quote), decoded."""
    quote = src[start]
    out, i = [], start + 1
    esc = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "`": "`",
           "0": "\0"}
    while i < len(src):
        ch = src[i]
        if ch == quote:
            return "".join(out)
        if ch == "\\":
            nxt = src[i + 1:i + 2]
            if nxt == "u":
                out.append(chr(int(src[i + 2:i + 6], 16)))
                i += 6
                continue
            if nxt == "x":
                out.append(chr(int(src[i + 2:i + 4], 16)))
                i += 4
                continue
            if nxt not in esc:
                return None
            out.append(esc[nxt])
            i += 2
            continue
        if quote == "`" and src.startswith("${", i):
            return None
        out.append(ch)
        i += 1
    return None


@functools.lru_cache(maxsize=2)
def vega_styles(bundle: str) -> tuple[str | None, str | None]:
    """The default stylesheets vega-embed and vega-tooltip insert (their text, taken from
    the bundle), so the page ships them itself: both libraries skip inserting a style whose
    id already exists, and the page's CSP allows only the styles it hashed. None when not
    found (a future bundle): the charts still draw, their menus unstyled."""
    found: list[str | None] = []
    for head in (".vega-embed {", "#vg-tooltip-element {"):
        text = None
        for q in ("'", '"', "`"):
            i = bundle.find(q + head)
            if i >= 0:
                text = _js_string(bundle, i)
                break
        found.append(text if text and "</" not in text else None)
    return found[0], found[1]
