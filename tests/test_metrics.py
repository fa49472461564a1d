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


def test_a_phase_counts_its_own_threads_cpu_and_chains_in_it_only():
    """Another thread's CPU (MPI's progress thread, a prefetch thread) is not the phase's: a
    phase that sleeps while another thread spins shows sleep, not CPU. A chained phase starts
    where the last phase ended only when that phase was its own thread's."""
    import threading
    import time

    rec = PhaseRecorder()
    go = threading.Event()

    def spin():   # 0.3 s of this thread's CPU, however busy the machine
        go.wait()
        start = time.thread_time()
        while time.thread_time() - start < 0.3:
            pass

    other = threading.Thread(target=spin)
    other.start()
    with rec.phase("wait", 0):
        go.set()
        other.join()
    (row,) = rec.rows
    assert row["user_s"] + row["sys_s"] < 0.1 and row["sleep_s"] > 0.2, row
    ahead = threading.Thread(target=_timed, args=(rec,))
    ahead.start()
    ahead.join()
    time.sleep(0.1)
    with rec.phase("read", 2, chain=True):
        pass
    assert rec.rows[-1]["wall_s"] < 0.05, "chained from another thread's phase"


def _timed(rec) -> None:
    with rec.phase("locate", 1):
        pass
