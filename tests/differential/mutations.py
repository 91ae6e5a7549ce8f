"""A seeded mutation engine over real run directories (issue 11's families).

``mutate(source, rng, family)`` returns a :class:`Mutation`: the run's top-level files with
one edit applied. Families: ``byte_flip``, ``truncation``, ``line_edit``, ``envelope``,
``json_odd``, ``manifest``, ``request``. Every edit is chosen by ``rng`` only, so a
``(seed, index)`` pair names a case for good.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FAMILIES = ("byte_flip", "truncation", "line_edit", "envelope", "json_odd", "manifest",
            "request", "combo")

# every str.splitlines() separator other than "\n" (§8.2)
SEPARATORS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029",
              "\r\n")
# Unicode whitespace that str.strip() strips (none of it is ASCII whitespace for bytes.strip)
UNICODE_WS = ("\u00a0", "\u3000", "\u2028", "\u0085", "\x1c", "\x1d", "\x1e", "\x1f", "\x0b",
              "\x0c", "\u2003", "\u202f", "\u205f", "\u1680", " \u00a0 ", "\t\u3000")
BAD_TIMESTAMPS = (
    "2026-08-20T24:00:00Z", "2026-08-20T24:00:00.000001Z", "2026-13-01T00:00:00Z",
    "2026-00-10T10:00:00Z", "2026-02-30T10:00:00Z", "2025-02-29T10:00:00Z",
    "2026-08-20T23:59:60Z", "2026-08-20T23:60:00Z", "2026-08-32T00:00:00Z",
    "\uff12026-08-20T21:02:47.879324Z", "2026-08-2\u0663T21:02:47Z",
    "2026-08-20T21:02:47.879324Z\\n", "2026-08-20T21:02:47.879324Z ", " 2026-08-20T21:02:47Z",
    "2026-08-20T21:02:47.879324+25:00", "2026-08-20T21:02:47.8793245Z",
    "2026-08-20T21:02:47", "2026-08-20", "1700000000", "2026-08-20 21:02:47Z",
    "2026-08-20T21:02:47.879324+01:00", "2024-02-29T00:00:00Z", "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59.999999Z", "2026-8-20T21:02:47Z", "",
)
RAW_TIMESTAMPS = ("null", "1700000000", "1.7e9", "true", "[]", "{}", "-1", "1e400")
SURROGATES = ("\\ud800", "\\udc00", "\\uDBFF", "\\udfff", "\\ud83d", "\\ud83d\\ude00",
              "\\uD834\\uDD1E")

Files = dict[str, bytes]


@dataclass(frozen=True)
class Mutation:
    family: str
    name: str
    files: Files
    source: str

    def write(self, run_dir: Path) -> Path:
        run_dir.mkdir(parents=True, exist_ok=True)
        for name, data in self.files.items():
            (run_dir / name).write_bytes(data)
        return run_dir


@dataclass(frozen=True)
class Source:
    name: str  # the run directory name (kept, so run_id == dirname)
    label: str
    files: Files


def load_sources(*roots: Path) -> list[Source]:
    """Every run directory below ``roots`` (with its subagents), top-level files only."""
    out: list[Source] = []
    for root in roots:
        for dirpath, dirnames, filenames in sorted(os.walk(root)):
            dirnames.sort()
            dirnames[:] = [d for d in dirnames if d not in ("workspace", ".task-env")]
            if "events.jsonl" not in filenames and "session.json" not in filenames:
                continue
            files = {}
            for fn in sorted(filenames):
                p = Path(dirpath, fn)
                if p.is_file() and not p.is_symlink():
                    files[fn] = p.read_bytes()
            out.append(Source(Path(dirpath).name, os.path.relpath(dirpath, root), files))
    return out


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def _event_lines(files: Files) -> tuple[list[bytes], bool]:
    data = files.get("events.jsonl", b"")
    parts = data.split(b"\n")
    ends_nl = data.endswith(b"\n")
    if ends_nl:
        parts = parts[:-1]
    return parts, ends_nl


def _join(parts: list[bytes], ends_nl: bool) -> bytes:
    return b"\n".join(parts) + (b"\n" if ends_nl and parts else b"")


def _with(files: Files, **changes: bytes) -> Files:
    out = dict(files)
    for k, v in changes.items():
        out[k.replace("__", ".")] = v
    return out


def _pick_line(rng: random.Random, parts: list[bytes], pred: Callable[[bytes], bool] = bool
               ) -> int | None:
    idx = [i for i, p in enumerate(parts) if pred(p)]
    return rng.choice(idx) if idx else None


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=True,
                      allow_nan=True).encode("utf-8", "surrogatepass")


def nested(depth: int, kind: str = "[", leaf: str = "") -> str:
    if kind == "[":
        return "[" * depth + leaf + "]" * depth
    return '{"a":' * (depth - 1) + "{" + (f'"a":{leaf}' if leaf else "") + "}" + "}" * (depth - 1)


def _insert_into_data(line: bytes, member: bytes) -> bytes | None:
    """Insert ``"key":value`` as the first member of the line's ``data`` object."""
    i = line.find(b'"data":{')
    if i < 0:
        return None
    j = i + len(b'"data":{')
    sep = b"" if line[j:j + 1] == b"}" else b","
    return line[:j] + member + sep + line[j:]


def _edit_line_obj(line: bytes, edit: Callable[[dict[str, Any]], None]) -> bytes:
    obj = json.loads(line)
    edit(obj)
    return dumps(obj)


# --------------------------------------------------------------------------------------------
# families
# --------------------------------------------------------------------------------------------
def _byte_flip(src: Source, rng: random.Random) -> tuple[str, Files]:
    files = src.files
    choice = rng.random()
    if choice < 0.45 and b'"created_at":"' in files.get("events.jsonl", b""):
        data = bytearray(files["events.jsonl"])
        spots = [m.start(1) for m in re.finditer(rb'"created_at":"([^"]{10,40})"', data)]
        start = rng.choice(spots)
        pos = start + rng.randrange(26)
        if data[pos:pos + 1] == b'"':
            pos = start
        bit = rng.randrange(8 if rng.random() < 0.2 else 4)
        data[pos] ^= 1 << bit
        return f"timestamp_bit@{pos}^{bit}", _with(files, events__jsonl=bytes(data))
    target = "events.jsonl" if choice < 0.85 else rng.choice(["session.json", "request.json"])
    if not files.get(target):
        target = "events.jsonl"
    data = bytearray(files.get(target, b""))
    if not data:
        return "empty", dict(files)
    n = 1 if rng.random() < 0.8 else rng.randrange(2, 6)
    where = []
    for _ in range(n):
        pos = rng.randrange(len(data))
        bit = rng.randrange(8)
        data[pos] ^= 1 << bit
        where.append(f"{pos}^{bit}")
    return f"{target}:flip@{','.join(where)}", {**files, target: bytes(data)}


def _truncation(src: Source, rng: random.Random) -> tuple[str, Files]:
    files = src.files
    data = files.get("events.jsonl", b"")
    r = rng.random()
    if r < 0.1 and files.get("session.json"):
        s = files["session.json"]
        cut = rng.randrange(len(s))
        return f"session_cut@{cut}", _with(files, session__json=s[:cut])
    if not data:
        return "empty", dict(files)
    if r < 0.35:
        cut = rng.randrange(len(data) + 1)
        return f"cut@{cut}", _with(files, events__jsonl=data[:cut])
    parts, ends = _event_lines(files)
    if r < 0.55:  # inside the last line
        last = parts[-1]
        keep = rng.randrange(len(last) + 1)
        return f"tail_cut_last_line@{keep}", _with(
            files, events__jsonl=_join(parts[:-1], True) + last[:keep])
    if r < 0.7:
        return "drop_final_newline", _with(files, events__jsonl=data.rstrip(b"\n"))
    if r < 0.85:
        k = rng.randrange(1, min(4, len(parts)) + 1)
        return f"drop_last_{k}_lines", _with(files, events__jsonl=_join(parts[:-k], True))
    cut = len(data) - rng.randrange(1, min(len(data), 40) + 1)
    return f"tail_bytes@{cut}", _with(files, events__jsonl=data[:cut])


def _line_edit(src: Source, rng: random.Random) -> tuple[str, Files]:
    files = src.files
    parts, ends = _event_lines(files)
    if not parts:
        return "empty", dict(files)
    i = rng.randrange(len(parts))
    op = rng.choice(["delete", "duplicate", "swap", "join", "join", "join", "ws_line",
                     "ws_line", "sep_outside", "sep_outside", "cr_space_nl", "crlf_all",
                     "sep_inside", "blank", "join_last"])
    p = list(parts)
    if op == "delete":
        del p[i]
    elif op == "duplicate":
        p.insert(i, p[i])
    elif op == "swap" and len(p) > 1:
        i = min(i, len(p) - 2)
        p[i], p[i + 1] = p[i + 1], p[i]
    elif op in ("join", "join_last") and len(p) > 1:
        i = len(p) - 2 if op == "join_last" else min(i, len(p) - 2)
        sep = rng.choice(SEPARATORS).encode()
        p[i:i + 2] = [p[i] + sep + p[i + 1]]
        op = f"{op}{sep!r}"
    elif op == "ws_line":
        ws = rng.choice(UNICODE_WS)
        p.insert(i, ws.encode())
        op = f"ws_line{ws!r}"
    elif op == "sep_outside":
        sep = rng.choice(SEPARATORS + UNICODE_WS).encode()
        p[i] = sep + p[i] if rng.random() < 0.5 else p[i] + sep
        op = f"sep_outside{sep!r}"
    elif op == "cr_space_nl":
        p[i] = p[i] + b"\r "
    elif op == "crlf_all":
        p = [x + b"\r" for x in p]
    elif op == "sep_inside":
        sep = rng.choice(SEPARATORS[:-1]).encode()
        line = p[i]
        m = list(re.finditer(rb'":"([^"\\]{2,})"', line))
        if m:
            mm = rng.choice(m)
            k = mm.start(1) + 1
            p[i] = line[:k] + sep + line[k:]
        op = f"sep_inside{sep!r}"
    elif op == "blank":
        p.insert(i, rng.choice([b"", b" ", b"\t", b"\r", b"  \t "]))
    return f"{op}@{i}", _with(files, events__jsonl=_join(p, ends))


def _envelope(src: Source, rng: random.Random) -> tuple[str, Files]:
    files = src.files
    parts, ends = _event_lines(files)
    idx = [k for k, x in enumerate(parts) if x.startswith(b"{")]
    if not idx:
        return "empty", dict(files)
    i = rng.choice(idx + [idx[-1]] * 3)  # the tail matters more for verdicts
    line = parts[i]
    op = rng.choice(["ts", "ts", "ts", "ts_raw", "ts_missing", "event_id", "seq_lax",
                     "extra_key", "run_id", "task_id", "data", "event_type", "seq_value"])
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return "unparsable", dict(files)
    name = op
    if op == "ts":
        ts = rng.choice(BAD_TIMESTAMPS)
        new = re.sub(rb'"created_at":"[^"]*"', b'"created_at":"' + ts.encode() + b'"', line)
        name = f"ts={ts!r}"
    elif op == "ts_raw":
        v = rng.choice(RAW_TIMESTAMPS)
        new = re.sub(rb'"created_at":"[^"]*"', b'"created_at":' + v.encode(), line)
        name = f"ts_raw={v}"
    elif op == "ts_missing":
        obj.pop("created_at", None)
        new = dumps(obj)
    elif op == "event_id":
        v = rng.choice([None, 5, "", "x", "DELETE"])
        if v == "DELETE":
            obj.pop("event_id", None)
        else:
            obj["event_id"] = v
        new = dumps(obj)
        name = f"event_id={v!r}"
    elif op == "seq_lax":
        s = obj.get("sequence")
        v = rng.choice([str(s), f" {s} ", float(s) if isinstance(s, int) else s, True, False,
                        f"{s}.0", f"+{s}", str(s) + "\u00a0"])
        obj["sequence"] = v
        new = dumps(obj)
        name = f"seq={v!r}"
    elif op == "seq_value":
        s = obj.get("sequence") if isinstance(obj.get("sequence"), int) else 0
        v = rng.choice([s + 1, s - 1, s + 2, -1, 0, 2 ** 63, 2 ** 64])
        obj["sequence"] = v
        new = dumps(obj)
        name = f"seq={v}"
    elif op == "extra_key":
        k = rng.choice(["text", "extra", "turn_id", "conversation_id", "summary"])
        obj[k] = rng.choice(["x", None, 1])
        new = dumps(obj)
        name = f"extra_key={k}:{obj[k]!r}"
    elif op == "run_id":
        v = rng.choice(["other-run", "", " " + str(obj.get("run_id")), None, 5,
                        str(obj.get("run_id")) + " "])
        obj["run_id"] = v
        new = dumps(obj)
        name = f"run_id={v!r}"
    elif op == "task_id":
        v = rng.choice(["other-task", None, "", 5, " " + str(obj.get("task_id"))])
        obj["task_id"] = v
        new = dumps(obj)
        name = f"task_id={v!r}"
    elif op == "data":
        v = rng.choice([None, [], "x", 1, {}])
        obj["data"] = v
        new = dumps(obj)
        name = f"data={v!r}"
    else:
        v = rng.choice(["", " ", " tool.started", "tool.started", "verification.started",
                        None, 1, "run.completed", "x\u0000"])
        obj["event_type"] = v
        new = dumps(obj)
        name = f"event_type={v!r}"
    parts = list(parts)
    parts[i] = new
    return f"{name}@{i}", _with(files, events__jsonl=_join(parts, ends))


def _json_odd(src: Source, rng: random.Random) -> tuple[str, Files]:
    files = src.files
    parts, ends = _event_lines(files)
    idx = [k for k, x in enumerate(parts) if b'"data":{' in x]
    if not idx:
        return "empty", dict(files)
    i = rng.choice(idx)
    line = parts[i]
    op = rng.choice(["surrogate", "surrogate", "surrogate_key", "surrogate_detail",
                     "surrogate_envelope", "nan", "dup_key", "dup_top", "deep", "deep",
                     "bigint", "bom", "bom_line", "bad_utf8", "nul"])
    new: bytes | None = line
    name = op
    if op in ("surrogate", "surrogate_detail"):
        s = rng.choice(SURROGATES)
        if op == "surrogate_detail":
            key = rng.choice(["tool_name", "summary", "model", "text", "error", "reason",
                              "base_sha"])
            new = _insert_into_data(line, f'"{key}":"a{s}b"'.encode())
            name = f"surrogate_detail:{key}={s}"
        else:
            strings = list(re.finditer(rb':"([^"\\]*)"', line))
            mm = rng.choice(strings) if strings else None
            if mm is None:
                new = _insert_into_data(line, f'"s":"{s}"'.encode())
            else:
                k = mm.start(1) + rng.randrange(mm.end(1) - mm.start(1) + 1)
                new = line[:k] + s.encode() + line[k:]
            name = f"surrogate={s}"
    elif op == "surrogate_key":
        s = rng.choice(SURROGATES)
        new = _insert_into_data(line, f'"k{s}":1'.encode())
        name = f"surrogate_key={s}"
    elif op == "surrogate_envelope":
        s = rng.choice(SURROGATES)
        key = rng.choice([b'"event_type":"', b'"run_id":"', b'"task_id":"', b'"event_id":"'])
        k = line.find(key)
        if k >= 0:
            k += len(key)
            new = line[:k] + s.encode() + line[k:]
        name = f"surrogate_envelope:{key.decode()}{s}"
    elif op == "nan":
        v = rng.choice(["NaN", "Infinity", "-Infinity", "1e400", "-0.0"])
        new = _insert_into_data(line, f'"n":{v}'.encode())
        name = f"nan={v}"
    elif op == "dup_key":
        new = _insert_into_data(line, b'"d":1,"d":2')
    elif op == "dup_top":
        key, val = rng.choice([(b"sequence", b"0"), (b"event_type", b'"x"'),
                               (b"run_id", b'"other"'), (b"data", b"{}")])
        new = b"{" + b'"' + key + b'":' + val + b"," + line[1:]
        name = f"dup_top={key.decode()}"
    elif op == "deep":
        d = rng.choice([197, 198, 199, 200, 201, 202, 203, 300, 500, 899, 900, 901, 958,
                        959, 960, 961, 962, 1000, 1100])
        kind = rng.choice(["[", "{"])
        leaf = rng.choice(["", "1", '"s"'])
        new = _insert_into_data(line, b'"deep":' + nested(d, kind, leaf).encode())
        name = f"deep={d}{kind}{leaf}"
    elif op == "bigint":
        n = rng.choice([4299, 4300, 4301, 5000])
        form = rng.choice(["int", "neg", "float", "exp", "seq"])
        digits = "1" * n
        lit = {"int": digits, "neg": "-" + digits, "float": digits + ".5",
               "exp": digits + "e2", "seq": digits}[form]
        if form == "seq":
            new = re.sub(rb'"sequence":\d+', b'"sequence":' + lit.encode(), line)
        else:
            new = _insert_into_data(line, b'"big":' + lit.encode())
        name = f"bigint={n}:{form}"
    elif op == "bom":
        data = files.get("events.jsonl", b"")
        return "bom_file", _with(files, events__jsonl=b"\xef\xbb\xbf" + data)
    elif op == "bom_line":
        new = b"\xef\xbb\xbf" + line
    elif op == "bad_utf8":
        k = rng.randrange(len(line))
        new = line[:k] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80"]) + line[k:]
    else:
        key = rng.choice(["text", "tool_name", "summary", "other"])
        new = _insert_into_data(line, f'"{key}":"a\\u0000b"'.encode())
        name = f"nul:{key}"
    if new is None:
        return "no_data", dict(files)
    parts = list(parts)
    parts[i] = new
    return f"{name}@{i}", _with(files, events__jsonl=_join(parts, ends))


_DEEP_MARK = "__DEEP_PLACEHOLDER__"


def _manifest(src: Source, rng: random.Random) -> tuple[str, Files]:
    files = src.files
    raw = files.get("session.json")
    if not raw:
        return "no_manifest", dict(files)
    try:
        m = json.loads(raw)
    except (ValueError, RecursionError):
        return "unparsable", dict(files)
    if not isinstance(m, dict):
        return "not_object", dict(files)
    ops = ["updated_at", "verif_no_argv", "empty_str", "nul_injected", "nul_command",
           "missing_default", "deep", "last_seq", "phase", "unknown_key", "misc",
           "valid_injected", "valid_command"]
    op = rng.choice(ops)
    name = op
    deep_text = None
    msgs = m.get("messages") if isinstance(m.get("messages"), list) else None
    if op == "updated_at":
        v = rng.choice([None, "DELETE", "2026-02-30T00:00:00Z", "2026-08-20T24:00:00Z", 0])
        if v == "DELETE":
            m.pop("updated_at", None)
        else:
            m["updated_at"] = v
        name = f"updated_at={v!r}"
    elif op == "verif_no_argv":
        ver = m.get("verification") or []
        if not ver:
            ver = [{"argv": ["pytest"], "duration_seconds": 0.1, "exit_code": 0,
                    "name": "check-1", "ok": True, "output": "ok"}]
        ver = [dict(v) for v in ver]
        k = rng.randrange(len(ver))
        what = rng.choice(["drop_argv", "drop_argv", "empty_argv", "drop_output", "name_empty"])
        if what == "drop_argv":
            ver[k].pop("argv", None)
        elif what == "empty_argv":
            ver[k]["argv"] = []
        elif what == "drop_output":
            ver[k].pop("output", None)
        else:
            ver[k]["name"] = ""
        m["verification"] = ver
        name = f"verification:{what}"
    elif op == "empty_str":
        target = rng.choice(["pending.request_id", "pending.run_id", "pending.action_id",
                             "lane", "cost.provider", "cost.model", "history.request_id",
                             "prompt_version", "protocol", "final_summary"])
        if target.startswith("pending."):
            m["pending_action"] = _pending(m, target.split(".")[1], "")
            if m.get("phase") not in ("completed", "failed", "cancelled"):
                m["phase"] = "waiting_approval"
        elif target in ("lane", "cost.provider", "cost.model"):
            rec = {"lane": "primary", "model": "m", "provider": "p",
                   "usage": {"input_tokens": 0}, "cost": {
                       "currency": "USD", "source": "estimated", "provider": "p",
                       "model": "m", "input_cost": 0.0}}
            if target == "lane":
                rec["lane"] = ""
            else:
                rec["cost"][target.split(".")[1]] = ""
            m["model_usage"] = list(m.get("model_usage") or []) + [rec]
        elif target == "history.request_id":
            m["approval_history"] = list(m.get("approval_history") or []) + [{
                "request": _pending(m, "request_id", ""), "decision": "allow_once",
                "decided_at": "2026-08-20T21:02:47Z"}]
        else:
            m[target] = ""
        name = f"empty:{target}"
    elif op in ("nul_injected", "valid_injected"):
        content = "ctx\x00x" if op == "nul_injected" else "ctx"
        item = {"item_type": "injected_context", "source": "context_pressure",
                "content": content}
        if rng.random() < 0.3:
            item.pop("item_type")
            name += ":no_item_type"
        m["messages"] = list(msgs or []) + [item]
    elif op in ("nul_command", "valid_command"):
        argv = ["pytest", "-q\x00"] if op == "nul_command" else ["pytest", "-q"]
        pa = _pending(m, None, None)
        pa["command"] = {"argv": argv, "name": "check-1", "timeout_seconds": 300.0}
        pa["tool_call"] = None
        pa["reason"] = "final_verification"
        pa["effect"] = "execute"
        pa["action_id"] = "verification:check-1"
        m["pending_action"] = pa
    elif op == "missing_default":
        target = rng.choice(["decided_at", "request_id", "tool_call_id", "item_type",
                             "pending.request_id"])
        if target in ("decided_at", "request_id"):
            rec = {"request": _pending(m, None, None), "decision": "allow_once",
                   "decided_at": "2026-08-20T21:02:47Z"}
            if target == "decided_at":
                rec.pop("decided_at")
            else:
                rec["request"].pop("request_id")
            m["approval_history"] = list(m.get("approval_history") or []) + [rec]
        elif target == "pending.request_id":
            pa = _pending(m, None, None)
            pa.pop("request_id")
            m["pending_action"] = pa
        elif target == "tool_call_id":
            m["messages"] = list(msgs or []) + [{
                "role": "assistant", "content": None,
                "tool_calls": [{"name": "read_file", "arguments": {"path": "a"}}]}]
        else:
            m["messages"] = list(msgs or []) + [{"source": "ide_diagnostics",
                                                   "content": "x"}]
        name = f"missing:{target}"
    elif op == "deep":
        d = rng.choice([50, 199, 202, 500, 899, 900, 901, 959, 960, 961, 1000, 1100, 3000])
        m["messages"] = list(msgs or []) + [{
            "role": "assistant", "content": None,
            "tool_calls": [{"tool_call_id": "c1", "name": "x",
                            "arguments": {"deep": _DEEP_MARK}}]}]
        deep_text = nested(d, rng.choice(["[", "{"]))
        name = f"deep={d}"
    elif op == "last_seq":
        v = m.get("last_event_sequence")
        if isinstance(v, int):
            m["last_event_sequence"] = v + rng.choice([-2, -1, 1, 2])
        name = f"last_seq={m.get('last_event_sequence')}"
    elif op == "phase":
        m["phase"] = rng.choice(["running", "completed", "waiting_approval", "paused", "x"])
        if rng.random() < 0.5:
            m["terminal"] = m["phase"] in ("completed", "failed", "cancelled")
        name = f"phase={m['phase']}:{m.get('terminal')}"
    elif op == "unknown_key":
        k = rng.choice(["extra", "verified_workspace_fingerprint", "model_usage", "cost"])
        m[k] = rng.choice([None, [], "x"])
        name = f"key:{k}={m[k]!r}"
    else:
        k, v = rng.choice([("schema_version", 2), ("base_sha", "abc"), ("step", -1),
                           ("run_id", " "), ("usage", {"total_tokens": 3}),
                           ("granted_effects", ["read", "read"]), ("active_started_at", None),
                           ("writer_claimed_at", None), ("active_wall_time_seconds", "1.5"),
                           ("repeat_count", 1.0), ("terminal", "true")])
        m[k] = v
        name = f"misc:{k}={v!r}"
    text = dumps(m)
    if deep_text is not None:
        text = text.replace(json.dumps(_DEEP_MARK).encode(), deep_text.encode())
    return name, _with(files, session__json=text)


def _pending(m: dict[str, Any], key: str | None, value: Any) -> dict[str, Any]:
    pa = {"action_id": "call_1", "effect": "modify", "policy_reason": "", "preview": "p",
          "reason": "model_tool", "request_id": "0123456789abcdef0123456789abcdef",
          "run_id": m.get("run_id"), "command": None,
          "tool_call": {"arguments": {}, "name": "write_file", "provider_metadata": {},
                        "tool_call_id": "call_1"}}
    if key is not None:
        pa[key] = value
    return pa


def _request(src: Source, rng: random.Random) -> tuple[str, Files]:
    files = src.files
    raw = files.get("request.json")
    if not raw:
        return "no_request", dict(files)
    try:
        r = json.loads(raw)
    except (ValueError, RecursionError):
        return "unparsable", dict(files)
    op = rng.choice(["nul_argv", "skills", "skills", "empty_argv", "instruction", "paths",
                     "task_id", "base_sha", "attachments", "limits", "deep", "extra"])
    name = op
    deep_text = None
    ver = [dict(v) for v in r.get("verification") or [{"name": "c", "argv": ["x"]}]]
    if op == "nul_argv":
        ver[0]["argv"] = list(ver[0].get("argv") or ["x"]) + ["a\x00b"]
        r["verification"] = ver
    elif op == "skills":
        v = rng.choice([[" lint "], ["lint", " lint"], ["a b"], ["-x"], [""], ["ok", "ok"],
                        ["\tlint\n"], ["x" * 64], ["x" * 65], ["lint\u00a0"]])
        r["enabled_skills"] = v
        name = f"skills={v!r}"
    elif op == "empty_argv":
        v = rng.choice([[], [""], [" "], ["x", ""]])
        ver[0]["argv"] = v
        r["verification"] = ver
        name = f"argv={v!r}"
    elif op == "instruction":
        r["instruction"] = rng.choice(["", "  ", "\u00a0", "x"])
    elif op == "paths":
        v = rng.choice([[], ["/abs"], ["a/../b"], [" src/** "], ["a", "a"], ["a\\b"],
                        ["a\x00"], [""]])
        r["allowed_paths"] = v
        name = f"paths={v!r}"
    elif op == "task_id":
        v = rng.choice([None, "DELETE", "", " " + str(r.get("task_id")), "other"])
        if v == "DELETE":
            r.pop("task_id", None)
        else:
            r["task_id"] = v
        name = f"task_id={v!r}"
    elif op == "base_sha":
        b = str(r.get("base_sha"))
        v = rng.choice([None, b.upper(), " " + b, "", "0" * 40])
        r["base_sha"] = v
        name = f"base_sha={v!r}"
    elif op == "attachments":
        r["attachments"] = rng.choice([[{"a": "b"}], [{"a": 1}], None])
    elif op == "limits":
        k = rng.choice(["max_steps", "wall_time_seconds", "max_total_tokens"])
        lim = dict(r.get("limits") or {})
        lim[k] = rng.choice([0, -1, None, 1, "2"])
        r["limits"] = lim
        name = f"limits:{k}={lim[k]!r}"
    elif op == "deep":
        d = rng.choice([100, 500, 960, 961, 1000, 2000])
        r["attachments"] = [{"x": _DEEP_MARK}]
        deep_text = nested(d)
        name = f"deep={d}"
    else:
        r["extra"] = 1
    text = dumps(r)
    if deep_text is not None:
        text = text.replace(json.dumps(_DEEP_MARK).encode(), deep_text.encode())
    return name, _with(files, request__json=text)


def _combo(src: Source, rng: random.Random) -> tuple[str, Files]:
    """Two edits of other families, one after the other (the second sees the first)."""
    names = []
    files = src.files
    for _ in range(2):
        family = rng.choice(FAMILIES[:-1])
        name, files = _FAMILY_FUNCS[family](Source(src.name, src.label, files), rng)
        names.append(f"{family}:{name}")
    return " + ".join(names), files


_FAMILY_FUNCS = {
    "byte_flip": _byte_flip, "truncation": _truncation, "line_edit": _line_edit,
    "envelope": _envelope, "json_odd": _json_odd, "manifest": _manifest, "request": _request,
    "combo": _combo,
}


def mutate(src: Source, rng: random.Random, family: str) -> Mutation:
    name, files = _FAMILY_FUNCS[family](src, rng)
    return Mutation(family, name, files, src.label)


def cases(sources: list[Source], seed: int, count: int, families: tuple[str, ...] = FAMILIES
          ) -> list[tuple[int, Mutation]]:
    """``count`` mutations, round-robin over families, sources chosen by the seeded rng."""
    out = []
    for k in range(count):
        rng = random.Random(f"{seed}:{k}")
        family = families[k % len(families)]
        src = rng.choice(sources)
        out.append((k, mutate(src, rng, family)))
    return out
