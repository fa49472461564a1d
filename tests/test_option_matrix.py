"""The differential option matrix (lmdbio.lab.testing.matrix): its combinations, its checks, its runs.

The all-pairs sample runs in ``make test``, a seeded random sample in ``make check``
(gate), the whole cross product in ``make test-matrix``.
"""

from __future__ import annotations

import textwrap
from dataclasses import asdict, replace

import pytest

from lmdbio.lab.testing import matrix as mx


@pytest.fixture(scope="module")
def pool():
    return mx.full_matrix((4,))


@pytest.fixture(scope="module")
def matrix_root(tmp_path_factory):
    """The matrix's data sets, made once for this file's MPI runs."""
    root = tmp_path_factory.mktemp("matrix")
    mx.make_datasets(root / "data")
    return root


def _fails(rows) -> str:
    return mx.failure_report(rows)


# --------------------------------------------------------------------------- combinations

def test_the_cross_product_collapses_to_one_combination_per_effective_setting(pool):
    raw = list(mx.raw_product(4))
    assert len(raw) == 43_200
    assert len(pool) == len(set(pool)) < len(raw) // 5
    assert all(mx.effective(c) == c for c in pool)        # collapsing twice changes nothing
    assert {mx.effective(c) for c in raw} == set(pool)
    base = mx.Combo(4, "lmdbio-lmm-dio", 0, False, "short", None, 1, "cifar10", True, False,
                    "default")
    # Options a variant does not use collapse; those it uses do not.
    assert mx.effective(replace(base, variant="lmdb", ranks_per_node=2)).ranks_per_node is None
    assert mx.effective(replace(base, ranks_per_node=2)).ranks_per_node == 2
    assert mx.effective(replace(base, coalesce="small")).coalesce == "default"
    direct = replace(base, variant="lmdbio-direct")
    assert mx.effective(replace(direct, coalesce="small")).coalesce == "small"
    assert mx.effective(replace(base, sidecar=False)).sidecar is True
    assert mx.effective(replace(direct, sidecar=False)).sidecar is False
    assert mx.effective(replace(base, last_batch="pad")).last_batch == "short"   # N % B == 0
    assert mx.effective(replace(base, last_batch="pad", uneven=True)).last_batch == "pad"
    # Each data set's N: a multiple of B, or gcd(N, B) = B/2 > B/P (the finding A).
    from math import gcd
    for records, (b, _) in mx.BATCHES.items():
        assert mx.dataset_records(records, False) % b == 0
        assert gcd(mx.dataset_records(records, True), b) == b // 2 > b // 4


def test_the_refusal_table_names_the_invalid_combinations():
    base = mx.Combo(4, "lmdbio-lmm", 0, "window", "short", None, 1, "cifar10", True, False,
                    "default")
    rule = mx.expected_refusal(base)
    assert rule is not None and rule.error == "ConfigurationError"
    assert mx.expected_refusal(replace(base, shuffle=False)) is None
    assert mx.expected_refusal(replace(base, variant="lmdbio-lmm-dio")) is None
    prov = replace(base, variant="lmdbio-lmm-dio-prov", shuffle=False, sidecar=False)
    assert mx.expected_refusal(prov).error == "ProvenanceError"
    assert mx.expected_refusal(replace(prov, sidecar=True)) is None
    # auto reads with lmdbio-direct on a local disk: no sidecar is fine there.
    assert mx.expected_refusal(replace(prov, variant="auto")) is None
    # On a shared file system auto picks PROV only where a sidecar is.
    shared = {True: "lmdbio-lmm-dio-prov-coal-stag", False: "lmdbio-lmm-dio-coal-stag"}
    assert mx.expected_refusal(replace(prov, variant="auto"), shared) is None


def test_all_pairs_covers_every_pair_of_option_values(pool):
    need = set().union(*(mx.pair_set(c) for c in pool))
    for chosen in (mx.all_pairs(pool), mx.fast_sample(pool)):
        have = set().union(*(mx.pair_set(c) for c in chosen if c in set(pool)))
        assert have == need
        assert len(chosen) == len(set(chosen)) <= 60        # the make test budget
        assert len({c.variant for c in chosen}) == len(mx.VARIANT_NAMES)
    assert set(mx.REGRESSIONS) <= set(pool)
    assert mx.fast_sample(pool)[:len(mx.REGRESSIONS)] == list(mx.REGRESSIONS)
    assert mx.all_pairs(pool) == mx.all_pairs(pool)          # deterministic
    assert mx.random_sample(pool, 20, 3) == mx.random_sample(pool, 20, 3)


def test_uneven_layouts_are_those_whose_reader_groups_serve_different_rank_counts():
    from lmdbio.topology import group_sizes

    assert mx.uneven_layouts(3) == [(None, 2), (2, 1)]        # issue 44's F20/F21 layouts
    assert (3, 2) in mx.uneven_layouts(5) and group_sizes(5, 3, 2) == [2, 1, 1, 1]
    assert mx.uneven_layouts(4) == [(None, 3), (3, 1), (3, 2)]
    assert not set(mx.uneven_layouts(4)) & set(mx.topologies(4))   # the P = 4 pool is even
    assert all(len(set(group_sizes(4, *t))) == 1 for t in mx.topologies(4))
    uneven = mx.full_matrix((4,), layouts="uneven")
    assert {(c.ranks_per_node, c.readers_per_node) for c in uneven} == set(mx.uneven_layouts(4))
    assert {c.coalesce for c in uneven} == {"default", "small", "medium"}
    cover = mx.uneven_groups(4)
    assert set().union(*map(mx.pair_set, cover)) == set().union(*map(mx.pair_set, uneven))
    assert cover[:len(mx.UNEVEN_REGRESSIONS)] == list(mx.UNEVEN_REGRESSIONS)
    assert set(mx.UNEVEN_REGRESSIONS) <= set(uneven) and set(mx.UNEVEN_REGRESSIONS) <= set(
        mx.fast_sample(mx.full_matrix((4,))))
    assert mx.selection("uneven")[0] == cover
    full = mx.selection("full", also=[8])[0]
    assert set(cover) <= set(full) and len(full) == len(set(full))


def test_the_lab_lists_of_variants_follow_the_variant_names():
    from lmdbio.options import parse_variant

    for name in mx.VARIANT_NAMES[:-1]:
        o = parse_variant(name)
        assert (name in mx.CURSOR_WALKS) == (o.locate in ("walk", "ring"))
        assert (name in mx.PROV_VARIANTS) == (o.locate == "provenance")
    assert mx.CURSOR_WALKS >= {"lmdb", "lmdbio-lmm", "lmdbio-lmm-dm"}
    assert "lmdbio-lmm-dio-prov-coal-stag" in mx.PROV_VARIANTS
    assert mx.SIDECAR_READERS == mx.PROV_VARIANTS | {"lmdbio-direct"}


# --------------------------------------------------------------------------- the checks

def _rank_out(c: mx.Combo, rank: int, epochs: dict, stream: list | None = None) -> dict:
    if stream is None:
        stream = [(ph, (t * c.batch) % c.n, True) for ph, t in
                  (("before epochs", 0), ("before epochs", 1), ("between epochs", 50),
                   ("between epochs", 51), ("after epochs", 90), ("after epochs", 91))]
    return {"rank": rank, "raised": None, "variant_read": c.variant, "checked": 1, "wrong": 0,
            "wrong_held": 0, "where": {}, "seconds": 0.1, "times": {}, "stream": stream,
            "epochs": epochs, "phase": "close"}


def _file_order(c: mx.Combo, rank: int, e: int) -> list[list[int]]:
    """Rank ``rank``'s batches of a file-order epoch under ``"short"``."""
    b, p = c.batch, c.nprocs
    share = b // p
    full, rest = divmod(c.n, b)
    out = [list(range(i * b + rank * share, i * b + (rank + 1) * share)) for i in range(full)]
    if rest:
        q, r = divmod(rest, p)
        lo = full * b + rank * q + min(rank, r)
        out.append(list(range(lo, lo + q + (rank < r))))
    return out


def test_merge_accepts_a_right_epoch_and_names_each_kind_of_wrong_one():
    c = mx.Combo(4, "lmdbio-lmm-dio", 0, False, "short", None, 1, "mixed", True, True, "default")
    item = {"id": 0, "combo": asdict(c), "break_after": 2}

    def outs(change=None):
        ranks = []
        for r in range(4):
            epochs = {e: _file_order(c, r, e) for e in (0, 1)}
            epochs[2] = epochs[0][:2]
            ranks.append(_rank_out(c, r, epochs))
        if change:
            change(ranks)
        return ranks

    assert mx.merge_ranks(item, outs())["problems"] == []

    def repeat(ranks):   # rank 1 delivers rank 0's first record instead of its own
        ranks[1]["epochs"][0][0][0] = 0

    def lose_last(ranks):   # the short last batch goes missing on rank 3
        ranks[3]["epochs"][1][-1] = []

    def stream_off(ranks):   # rank 2's second read is another global batch
        ranks[2]["stream"][1] = ("before epochs", 64, True)

    def broke_late(ranks):
        ranks[0]["epochs"][2] = ranks[0]["epochs"][0][:3]

    for change, says in ((repeat, "twice in one global batch"), (lose_last, "not every record"),
                         (stream_off, "different global batches"), (broke_late, "broken early")):
        problems = " | ".join(mx.merge_ranks(item, outs(change))["problems"])
        assert says in problems, (change.__name__, problems)


def test_verdicts_hold_refusals_to_the_table():
    row = {"error": "", "refused": "", "wrong": 0, "wrong_held": 0, "problems": []}
    assert mx.verdict(row, None) == "ok"
    assert mx.verdict({**row, "wrong_held": 3}, None) == "FAIL: wrong records"
    assert mx.verdict(row, {"error": "ConfigurationError"}).startswith("FAIL: ran")
    refused = {**row, "refused": "ConfigurationError",
               "refused_classes": ["ConfigurationError", "LmdbioError", "ValueError"]}
    assert mx.verdict(refused, {"error": "ConfigurationError"}) == "refused"
    assert mx.verdict(refused, None) == "FAIL: unexpected ConfigurationError"
    assert mx.verdict(refused, {"error": "ProvenanceError"}).startswith("FAIL: refused with")


def test_a_combination_that_hangs_or_ends_the_job_is_named_and_the_rest_still_run(tmp_path):
    """The runner's watchdog, with a stand-in driver: item 1 hangs, item 2 ends the job."""
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent("""
        import json, sys, time
        items = json.load(open(sys.argv[1]))["items"]
        for pos in range(int(sys.argv[3]), len(items)):
            it = items[pos]
            print("MATRIX " + json.dumps({"event": "start", "pos": pos}), flush=True)
            if it["id"] == 1:
                time.sleep(600)
            if it["id"] == 2:
                sys.exit(3)
            print("MATRIX " + json.dumps({"event": "done", "row": {"id": it["id"], "ok": 1}}),
                  flush=True)
    """))
    c = mx.Combo(1, "lmdb", 0, False, "short", None, 1, "cifar10", True, False, "default")
    items = [{"id": k, "combo": asdict(c)} for k in range(4)]
    logged = []
    rows = mx.run_job(items, 1, tmp_path, 3, {"PATH": "/usr/bin:/bin"}, logged.append,
                      driver=driver)
    assert [r.get("ok") for r in rows] == [1, None, None, 1]
    assert rows[1]["error"].startswith("hang") and rows[2]["error"].startswith("crash: the job "
                                                                                "ended (exit 3)")
    assert len(logged) == 2 and mx.verdict(rows[1], None) == "FAIL: hang"


def test_failures_are_grouped_with_a_command_that_reruns_them(pool):
    rows = []
    for c in pool[:3]:
        rows.append({**asdict(c), "verdict": "FAIL: wrong records", "error": "", "wrong": 4,
                     "wrong_held": 0, "where": "between epochs: 4", "problems": [],
                     "refused": ""})
    text = mx.failure_report(rows)
    assert text.startswith("3 x wrong records (no prefetch): stream reads")
    assert "rerun: .venv/bin/python -m lmdbio.lab.testing.matrix full --where variant=lmdb" in text
    cmd = text.split("rerun: ")[1].split()
    wheres = [cmd[k + 1] for k, a in enumerate(cmd) if a == "--where"]
    combos, _ = mx.selection("full", where=wheres)
    assert set(pool[:3]) <= set(combos)


# --------------------------------------------------------------------------- the runs

def test_the_all_pairs_sample_delivers_exactly_its_records(pool, matrix_root):
    """``make test``: every pair of option values at least once, the settings of issue 28's
    findings (matrix.REGRESSIONS) and of issue 44's F20/F21 on uneven reader groups
    (matrix.UNEVEN_REGRESSIONS), against py-lmdb."""
    rows = mx.run(mx.fast_sample(pool), root=matrix_root, hang_s=60)
    assert not [r for r in rows if r["verdict"].startswith("FAIL")], _fails(rows)
    assert sum(r["checked"] for r in rows) > 0


@pytest.mark.gate
def test_a_random_sample_delivers_exactly_its_records(pool, matrix_root):
    """``make check``: 75 combinations drawn with a fixed seed, beside make test's all-pairs
    sample (make test-matrix runs every combination)."""
    rows = mx.run(mx.random_sample(pool, 75, seed=28), root=matrix_root, hang_s=60)
    assert not [r for r in rows if r["verdict"].startswith("FAIL")], _fails(rows)

