"""relayflowd rules (journal §7): one journal per rule shows exactly its rule; the journal §9 crash cuts
(real SIGKILL) show the spec's counts at the kill and after resume; the 8-way race, a segment
rollover and several consumers; state atomicity of the reducer."""

from __future__ import annotations

import os
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rivumi_analysis.relay import relay_audit
from rivumi_analysis.relay import tables as T
from rivumi_analysis.relay.read import Envelope, read_sqlite
from rivumi_analysis.relay.rules import Context, Spec, State, fold_entries, step
from rivumi_analysis.synth import relay_scenarios as S
from rivumi_analysis.synth.relay_crash import CUTS
from rivumi_analysis.synth.relayflowd import JournalWriter, Refused
from tests.conftest import examples

from .relay_helpers import only, rules, snapshot


@pytest.fixture(scope="module")
def violation_journals(relay_catalog):
    return relay_catalog["violations"]


@pytest.mark.parametrize("rule", S.ALL_RULES)
def test_each_violation_journal_shows_exactly_its_rule(violation_journals, rule):
    rec = only(relay_audit([violation_journals[rule]]))
    assert rec["verdict"] == "violations"
    assert {v["rule"] for v in rec["violations"]} == {rule}
    assert len(rec["violations"]) == 1
    assert rec["quarantined"] == 0
    assert rec["dead_attempts_unexplained"] == (1 if rule == "DEAD" else 0)
    v = T.relay_violations_df(violation_journals[rule])
    assert v["rule"].to_list() == [rule] and v["message"].str.len_chars().min() > 10


def test_violations_are_sorted_by_seq_then_rule_string(tmp_path):
    w = JournalWriter.create(str(tmp_path / "01X.sqlite3"), "01X")
    S._base(w)
    S._app(w, "alice", 1, "ping", S.PING, attempt=2)   # D4 only
    S._dlv(w, "bob", 2, S.PING, attempt=2)             # D4 and C6 at one seq
    w.start("alice", 2)                                # makes alice#1 DEAD at seq 3
    w.close()
    assert rules(only(relay_audit([str(tmp_path)]))) == [("DEAD", 3), ("D4", 6), ("C6", 7),
                                                        ("D4", 7)]


# --- the crash test (journal §9) ---------------------------------------------------------------------

EXPECTED = {  # cut: (appended, delivered, acknowledged, redeliveries requests/bob, provider calls)
    "append": (2, 2, 2, 0, 2), "delivery": (2, 3, 2, 1, 2),
    "effect": (2, 3, 2, 1, 2), "ack": (2, 2, 2, 0, 2)}
AT_KILL = {  # cut: channel rows (channel, consumer, delivered, acknowledged, unacked) + effects
    "append": ([], 0),
    "delivery": ([("requests", "bob", 1, 0, 1)], 0),
    "effect": ([("requests", "bob", 1, 0, 1)], 1),
    "ack": ([("requests", "bob", 1, 1, 0)], 1)}


@pytest.fixture(scope="module")
def crashes(relay_catalog):
    return relay_catalog["crash"]


@pytest.mark.parametrize("cut", CUTS)
def test_crash_cut_at_the_kill(crashes, cut):
    kill = crashes[cut]["kill"]
    assert os.path.getsize(kill + "-wal") > 0  # SIGKILL: nothing was checkpointed
    before = snapshot(os.path.dirname(kill))
    rec = only(relay_audit([kill]))
    assert snapshot(os.path.dirname(kill)) == before
    assert rec["verdict"] == "consistent" and rec["violations"] == []
    rows, effects = AT_KILL[cut]
    assert [(c["channel"], c["consumer"], c["delivered"], c["acknowledged"],
             c["unacked_at_end"]) for c in rec["channels"]] == rows
    assert rec["effects_confirmed"] == effects
    att = T.relay_attempts_df(kill)
    # both attempt-1 starts unexplained but live at the tail: not a violation
    assert att.select("step_id", "attempt", "status").rows() == [("alice", 1, "live"),
                                                                 ("bob", 1, "live")]
    assert not [e for e in read_sqlite(kill).entries if e.entry_type == "run.completed"]


@pytest.mark.parametrize("cut", CUTS)
def test_crash_cut_after_resume(crashes, cut):
    path = crashes[cut]["resumed"]
    rec = only(relay_audit([path]))
    assert rec["verdict"] == "consistent" and rec["violations"] == []
    appended, delivered, acked, redeliveries, calls = EXPECTED[cut]
    chans = {(c["channel"], c["consumer"]): c for c in rec["channels"]}
    assert set(chans) == {("requests", "bob"), ("replies", "alice")}
    assert sum(c["appended"] for c in chans.values()) == appended
    assert sum(c["delivered"] for c in chans.values()) == delivered
    assert sum(c["acknowledged"] for c in chans.values()) == acked
    assert chans[("requests", "bob")]["redeliveries"] == redeliveries
    assert chans[("requests", "bob")]["acked_offset"] == 1
    assert chans[("replies", "alice")]["acked_offset"] == 1
    assert rec["effects_confirmed"] == calls and rec["dead_attempts_unexplained"] == 0
    att = T.relay_attempts_df(path)
    assert att.group_by("step_id").len().sort("step_id").rows() == [("alice", 2), ("bob", 2)]
    assert sorted(att.filter(att["attempt"] == 1)["completion_reason"].to_list()) == [
        "crashed", "crashed"]
    deliveries = T.relay_channel_deliveries_df(path)
    redeliv = deliveries.filter(deliveries["redelivery"])
    assert redeliv["redelivery_across_attempts"].to_list() == [True] * redeliveries
    effects = [e for e in read_sqlite(path).entries if e.entry_type == "effect.recorded"
               and e.step_id == "bob"]
    assert [e.payload["deduped"] for e in effects] == (
        [False, True] if cut in ("effect", "ack") else [False])
    completed = [e for e in read_sqlite(path).entries if e.entry_type == "run.completed"]
    assert [e.payload["completionReason"] for e in completed] == ["success"]


# --- journal §10 and friends -------------------------------------------------------------------------


def test_eight_way_race(relay_catalog):
    path = relay_catalog["race"]
    rec = only(relay_audit([path]))
    assert rec["verdict"] == "consistent"
    assert rec["channels"] == [{"channel": "jobs", "consumer": "consumer", "appended": 1,
                                "delivered": 8, "acknowledged": 1, "redeliveries": 7,
                                "acked_offset": 1, "unacked_at_end": 0}]
    d = T.relay_channel_deliveries_df(path)
    assert d["seq"].n_unique() == 8 and d["offset"].unique().to_list() == [1]
    assert d["delivery_ordinal"].sort().to_list() == list(range(1, 9))
    assert d["redelivery_within_attempt"].sum() == 7


def test_ack_crosses_a_segment_rollover(relay_catalog):
    path = relay_catalog["segments"]
    rec = only(relay_audit([path]))
    assert rec["verdict"] == "consistent"
    acks = T.relay_channel_acks_df(path)
    first = acks.row(0, named=True)
    assert (first["segment_id"], first["delivery_segment_id"]) == (2, 1)
    assert rec["channels"][0]["redeliveries"] == 1


def test_several_consumers(relay_catalog):
    path = relay_catalog["consumers"]
    rec = only(relay_audit([path]))
    got = {c["consumer"]: (c["delivered"], c["acknowledged"], c["redeliveries"],
                           c["acked_offset"], c["unacked_at_end"]) for c in rec["channels"]}
    assert got == {"fast": (3, 3, 0, 3, 0), "slow": (3, 1, 1, 1, 1), "stuck": (2, 0, 1, 0, 1)}
    cur = T.relay_channel_cursor_df(path)
    last = cur.group_by("consumer").last().sort("consumer")
    assert last.select("consumer", "head", "acked_offset", "lag", "in_flight").rows() == [
        ("fast", 3, 3, 0, 0), ("slow", 3, 1, 2, 1), ("stuck", 3, 0, 3, 1)]
    # consumers are known from their first receive only
    assert cur.filter(cur["consumer"] == "stuck")["seq"].min() > cur["seq"].min()


# --- writer refuses what the kernel refuses --------------------------------------------------


def test_writer_refusals_leave_the_journal_unchanged(tmp_path):
    w = JournalWriter.create(str(tmp_path / "01X.sqlite3"), "01X")
    S._base(w)
    w.channel_append("alice", 1, "requests", "m", {"n": 1})
    n = len(read_sqlite(w.path).entries)
    with pytest.raises(Refused) as err:
        w.channel_append("alice", 1, "requests", "m", {"n": 1.0})  # D5: changed content
    assert err.value.code == "channel_conflict"
    with pytest.raises(Refused):
        w.channel_append("alice", 1, "replies", "x", 1)  # D3: undeclared stream
    with pytest.raises(Refused):
        w.channel_receive("bob", 2, "requests")  # D4: not the live attempt
    assert len(read_sqlite(w.path).entries) == n
    assert w.channel_receive("bob", 1, "requests").offset == 1  # nothing consumed
    w.close()


# --- state atomicity -------------------------------------------------------------------------


def _envs(path: str) -> list[Envelope]:
    return list(read_sqlite(path).entries)


MUTATIONS = ("offset", "consumer", "step", "attempt", "message", "delivery_seq", "drop", "dup")


def _mutate(envs: list[Envelope], rnd: random.Random) -> list[Envelope]:
    out = list(envs)
    for _ in range(rnd.randint(1, 4)):
        i = rnd.randrange(len(out))
        e = out[i]
        kind = rnd.choice(MUTATIONS)
        p = dict(e.payload)
        if kind == "drop":
            del out[i]
            continue
        if kind == "dup":
            out.insert(i, e)
            continue
        if kind == "offset" and "offset" in p:
            p["offset"] = max(0, p["offset"] + rnd.choice((-1, 1, 2)))
        elif kind == "consumer" and "consumer" in p:
            p["consumer"] = rnd.choice(("alice", "bob", "zed"))
        elif kind == "message" and "message" in p:
            p["message"] = {"text": rnd.choice(("ping", 1, 1.0))}
        elif kind == "delivery_seq" and "delivery_seq" in p:
            p["delivery_seq"] += rnd.choice((-1, 1))
        elif kind == "step":
            e = replace(e, step_id=rnd.choice(("alice", "bob", None)))
        elif kind == "attempt":
            e = replace(e, attempt=rnd.choice((1, 2, None)))
        out[i] = replace(e, payload=p)
    return out


@pytest.fixture(scope="module")
def exchange(crashes):
    return _envs(crashes["delivery"]["resumed"])


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_refused_entries_change_nothing(exchange, seed):
    envs = _mutate(exchange, random.Random(seed))
    ctx = Context(envs[0].run_id, None, Spec.of(envs))
    state = State()
    for e in envs:
        new, vs, applied = step(state, e, ctx)
        refused = any(v.rule[0] in "CJF" for v in vs)
        assert applied == (not refused)
        if refused:  # state-atomic: only the J1 segment marker may move
            assert replace(new, j1_segment=state.j1_segment) == state
        state = new
    fold = fold_entries(envs, run_id=envs[0].run_id)
    assert fold.state == state
    assert all(v.seq in {e.seq for e in envs} for v in fold.violations)


@settings(max_examples=examples(100), deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 30)), max_size=40))
def test_grow_versions_behave_like_copied_dicts(ops):
    from rivumi_analysis.relay.rules import Grow

    versions: list[tuple[Grow, dict]] = [(Grow(), {})]
    for base, key in ops:  # grow from any earlier version: branches included
        g, d = versions[base % len(versions)]
        if key in d:
            continue
        versions.append((g.add(key, key * 2), {**d, key: key * 2}))
    for g, d in versions:
        assert dict(g) == d and len(g) == len(d)
        assert all((k in g) == (k in d) for k in range(31))
