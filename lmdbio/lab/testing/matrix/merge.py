"""Rank 0's verdict on one combination, from every rank's check."""

from __future__ import annotations

from collections import Counter
from dataclasses import fields

from .combos import PEER_TIMEOUT_S, Combo

__all__ = ["merge_ranks", "verdict", "combo_fields", "break_after", "lost_row"]


def _epoch_problems(c: Combo, e: int, per_rank: list[list[list[int]]]) -> list[str]:
    """What is wrong with epoch ``e``'s indices gathered from every rank (set semantics)."""
    n, B, P = c.n, c.batch, c.nprocs
    share = B // P
    full, rest = divmod(n, B)
    nb = full if (c.last_batch == "drop" or not rest) else full + 1
    out = []
    counts = [len(bs) for bs in per_rank]
    if counts != [nb] * P:
        return [f"epoch {e}: batches per rank {counts}, want {nb} each"]
    flat: Counter = Counter()
    order: list[int] = []
    for i in range(nb):
        parts = [per_rank[r][i] for r in range(P)]
        last = i == full
        sizes = [len(p) for p in parts]
        if not last and sizes != [share] * P:
            out.append(f"epoch {e} batch {i}: records per rank {sizes}, want {share}")
        if last and c.last_batch == "short" and sum(sizes) != rest:
            out.append(f"epoch {e}: the short last batch holds {sum(sizes)} records, want {rest}")
        if last and c.last_batch == "pad" and sizes != [share] * P:
            out.append(f"epoch {e}: the padded last batch has {sizes} per rank, want {share}")
        glob = [j for p in parts for j in p]
        if len(set(glob)) != len(glob):
            out.append(f"epoch {e} batch {i}: a record twice in one global batch")
        if c.shuffle is False and not last:
            want = [list(range(i * B + r * share, i * B + (r + 1) * share)) for r in range(P)]
            if parts != want:
                out.append(f"epoch {e} batch {i}: file order wants positions {i * B}..; "
                           f"got {[p[:2] for p in parts]}..")
        flat.update(glob)
        order += glob
    delivered = sum(flat.values())
    if c.last_batch == "short" or not rest:
        if flat != Counter(range(n)):
            missing = n - len(flat)
            out.append(f"epoch {e}: not every record exactly once ({delivered} delivered, "
                       f"{missing} missing, {sum(v - 1 for v in flat.values())} repeats)")
    elif c.last_batch == "drop":
        if delivered != full * B or len(flat) != delivered or not set(flat) <= set(range(n)):
            out.append(f"epoch {e}: drop delivered {delivered} ({len(flat)} distinct), want "
                       f"{full * B} distinct")
        elif c.shuffle is False and set(flat) != set(range(full * B)):
            out.append(f"epoch {e}: drop in file order must leave out the last {rest} records")
    else:   # pad
        if (set(flat) != set(range(n)) or delivered != nb * B or max(flat.values()) > 2):
            out.append(f"epoch {e}: pad delivered {delivered} ({len(flat)} distinct, at most "
                       f"{max(flat.values())} times), want all {n} and {B - rest} repeats")
        elif c.shuffle is False and {j for j, k in flat.items() if k == 2} != set(range(B - rest)):
            out.append(f"epoch {e}: pad in file order must repeat records 0..{B - rest - 1}")
    if c.shuffle is not False and order == sorted(order):
        out.append(f"epoch {e}: shuffled, but delivered in file order")
    return out


def merge_ranks(item: dict, ranks: list[dict]) -> dict:
    """Rank 0: one result row from every rank's :func:`check_combination` output."""
    c = Combo(**item["combo"])
    n, B = c.n, c.batch
    raised = [r["raised"] for r in ranks]
    row = {"id": item["id"], **combo_fields(c), "n": n, "batch": B,
           "break_after": item["break_after"], "variant_read": ranks[0]["variant_read"] or "",
           "checked": sum(r["checked"] for r in ranks), "wrong": sum(r["wrong"] for r in ranks),
           "wrong_held": sum(r["wrong_held"] for r in ranks),
           "seconds": round(max(r["seconds"] for r in ranks), 3),
           "refused": "", "reason": "", "error": "", "problems": []}
    where: Counter = Counter()
    for r in ranks:
        where.update(r["where"])
    row["where"] = "; ".join(f"{k}: {v}" for k, v in sorted(where.items()))
    times: Counter = Counter()
    for r in ranks:
        for k, v in r.get("times", {}).items():
            times[k] = max(times[k], v)
    if times:
        slow, secs = max(times.items(), key=lambda kv: kv[1])
        row["slowest"], row["slowest_s"] = f"{slow}: {secs:.2f} s", round(secs, 3)
    if any(raised):
        # The cause first: a rank's own error, then a timeout, then the PeerError of the
        # ranks that were told about it.
        first = min((x for x in raised if x), key=lambda x: (
            "PeerError" in x["classes"], x["type"] != "PeerTimeoutError"))
        text = f"{first['type']}: {first['message']}"
        if len({(x["type"], x["phase"]) if x else None for x in raised}) == 1 \
                and first["phase"] == "setup" and first["lmdbio"]:
            row["refused"], row["reason"] = first["type"], first["message"]
            row["refused_classes"] = first["classes"]
        else:
            on = [r["rank"] for r in ranks if r["raised"] == first]
            others = sorted({f"{x['type']} in {x['phase']}" for x in raised if x and x != first})
            also = f" (other ranks: {', '.join(others)})" if others else ""
            row["error"] = (f"rank(s) {on} in {first['phase']}: {text} [at {first['at']}]"
                            f"{also}")[:900]
        return row
    problems = row["problems"]
    # The stream: the same global batch on every rank at each read, consecutive pairs.
    streams = [r["stream"] for r in ranks]
    if len({len(s) for s in streams}) != 1:
        problems.append(f"stream reads per rank differ: {[len(s) for s in streams]}")
    else:
        for k in range(len(streams[0])):
            phase = streams[0][k][0]
            starts = {s[k][1] for s in streams}
            if not all(s[k][2] for s in streams):
                problems.append(f"{phase} read {k}: a rank's share is not {B // c.nprocs} "
                                "consecutive positions")
            if len(starts) != 1:
                problems.append(f"{phase} read {k}: the ranks are on different global batches "
                                f"(starts {sorted(starts)})")
        firsts = [s[1] for s in streams[0]]
        if firsts[:2] != [0, B % n]:
            problems.append(f"the first two reads start at {firsts[:2]}, want [0, {B % n}]")
        for k in range(0, len(firsts) - 1, 2):
            if (firsts[k] + B) % n != firsts[k + 1]:
                problems.append(f"{streams[0][k][0]}: two reads are not consecutive batches "
                                f"(starts {firsts[k]}, {firsts[k + 1]})")
    for e in (0, 1):
        problems += _epoch_problems(c, e, [r["epochs"].get(e, []) for r in ranks])
    nb = n // B if (c.last_batch == "drop" or not n % B) else -(-n // B)
    broken = [len(r["epochs"].get(2, [])) for r in ranks]
    if broken != [min(item["break_after"], nb)] * c.nprocs:
        problems.append(f"epoch 2 (broken early): batches per rank {broken}, "
                        f"want {item['break_after']}")
    if c.shuffle is not False and not problems:   # (every rank has every batch)
        orders = [[j for i in range(len(ranks[0]["epochs"][e]))
                   for r in ranks for j in r["epochs"][e][i]] for e in (0, 1)]
        if orders[0] == orders[1]:
            problems.append("epochs 0 and 1 in the same order")
    return row


def verdict(row: dict, expect: dict | None) -> str:
    """``ok``, ``refused`` (as :data:`REFUSALS` expects) or ``FAIL: why``."""
    if row.get("error"):
        return "FAIL: " + ("hang" if row["error"].startswith("hang") else
                           "crash" if row["error"].startswith("crash") else "error")
    if expect is not None:
        if not row["refused"]:
            return f"FAIL: ran, expected {expect['error']}"
        if expect["error"] not in row.get("refused_classes", [row["refused"]]):
            return f"FAIL: refused with {row['refused']}, expected {expect['error']}"
        return "refused"
    if row["refused"]:
        return f"FAIL: unexpected {row['refused']}"
    if row["wrong"] or row["wrong_held"]:
        return "FAIL: wrong records"
    if row["problems"]:
        return "FAIL: epoch or stream"
    if row.get("slowest_s", 0) >= 0.9 * PEER_TIMEOUT_S:
        # Right records, but a rank waited out a peer timeout on the way (at the default
        # LMDBIO_TIMEOUT a user waits two minutes there).
        return "FAIL: waited a timeout"
    return "ok"


def combo_fields(c: Combo) -> dict:
    return {f.name: getattr(c, f.name) for f in fields(c)}


def break_after(c: Combo) -> int:
    """Batches of epoch 2 read before breaking out: 1 or 2, fixed per combination (a rerun
    of a combination breaks where the first run did)."""
    import zlib

    return 1 + zlib.crc32(c.label().encode()) % 2


def lost_row(item: dict, error: str) -> dict:
    """The row of a combination that gave no result; ``error`` says why (hang, crash)."""
    c = Combo(**item["combo"])
    return {"id": item["id"], **combo_fields(c), "n": c.n, "batch": c.batch,
            "break_after": item.get("break_after", 0), "variant_read": "",
            "checked": 0, "wrong": 0, "wrong_held": 0, "seconds": 0.0, "refused": "",
            "reason": "", "error": error, "problems": [], "where": ""}
