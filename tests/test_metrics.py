"""The phase recorder: timed phases keep one row each; untimed ones keep nothing."""

from lmdbio.metrics import PhaseRecorder


def test_untimed_phases_keep_nothing_and_share_no_counters():
    rec = PhaseRecorder(0, enabled=False)
    with rec.phase("read", 0) as row:
        row["bytes"] = 5
    with rec.phase("read", 1, chain=True) as row:
        assert row == {}   # each phase's counters start empty
        row["bytes"] = row.get("bytes", 0) + 7
    assert rec.rows == []


def test_timed_phases_keep_their_counters_and_chain_from_the_last_end():
    rec = PhaseRecorder(3)
    with rec.phase("locate", 0) as row:
        row["extents"] = 2
    with rec.phase("read", 0, chain=True) as row:
        row["bytes"] = 4096
    locate, read = rec.rows
    assert (locate["rank"], locate["phase"], locate["extents"]) == (3, "locate", 2)
    assert (read["phase"], read["bytes"], read["batch"]) == ("read", 4096, 0)
    assert read["t_start"] == locate["t_end"] and read["wall_s"] >= 0
