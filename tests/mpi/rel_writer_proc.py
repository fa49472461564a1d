"""A concurrent LMDB writer (not under mpiexec): rewrites, appends and deletes until killed.

usage: rel_writer_proc.py DB READY_FILE
Each round overwrites every record's value (new sizes, so LMDB frees and
reuses pages) in commits of 100, appends 50 new keys and deletes 50 old ones.
It touches READY_FILE after its first commit.
"""

import random
import sys

import lmdb

db, ready = sys.argv[1], sys.argv[2]
env = lmdb.open(db, map_size=1 << 30)   # the data format is sniffed from the file
rng = random.Random(7)
touched = False
rnd = 0
while True:
    with env.begin() as txn:
        keys = [bytes(k) for k, _ in txn.cursor()]
    for start in range(0, len(keys), 100):
        with env.begin(write=True) as txn:
            for k in keys[start:start + 100]:
                txn.put(k, bytes([rng.randrange(256)]) * rng.choice([100, 2500, 5000, 9000]))
        if not touched:
            open(ready, "w").close()
            touched = True
    with env.begin(write=True) as txn:
        for i in range(50):
            txn.put(f"zz{rnd:05d}_{i:03d}".encode(), b"n" * rng.choice([300, 6000]))
        for k in rng.sample(keys, min(50, len(keys) // 4)):
            txn.delete(k)
    rnd += 1
