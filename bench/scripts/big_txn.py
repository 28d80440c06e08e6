"""One transaction of n seed-000 items driven from Python, with the uuids
made inside the loop (as the seed's Java code does), so the peak RSS printed
is the store's and the interpreter's, not a list of 10^7 prepared inputs.

    python bench/big_txn.py --n 10000000

Prints seconds, µs per item, the casket's size and stats, the count of the
queue key after reopening, and the process's peak RSS (VmHWM).
"""
import argparse
import os
import shutil
import tempfile
import time
import uuid

import pyqstore


def vm_hwm_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--dir", default=None, help="directory for the casket (default: a temp dir)")
    ap.add_argument("--no-sync", action="store_true")
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="qstore-big-", dir=args.dir)
    path = os.path.join(d, "big.qdb")
    try:
        db = pyqstore.open(path, "n", sync=not args.no_sync)
        uuid4 = uuid.uuid4
        t0 = time.perf_counter()
        db.begin()
        putdup = db.putdup
        for i in range(args.n):
            u = str(uuid4()).encode()
            putdup(b"QUEUE", u)
            putdup(u, u)
            if i % 1_000_000 == 999_999:
                print(f"  {i + 1:>10} items  {time.perf_counter() - t0:8.1f} s  "
                      f"peak RSS {vm_hwm_kib() / 1024:.0f} MiB", flush=True)
        t1 = time.perf_counter()
        db.commit()
        t2 = time.perf_counter()
        st = db.stats()
        db.close()
        db = pyqstore.open(path, "r")
        count = db.count(b"QUEUE")
        db.close()
        secs = t2 - t0
        print(f"n={args.n}: {secs:.1f} s in the transaction (commit {t2 - t1:.1f} s), "
              f"{secs / args.n * 1e6:.2f} us/item, {args.n / secs:,.0f} items/s")
        print(f"casket {os.path.getsize(path) / 2**20:.0f} MiB, pages {st['pages']}, "
              f"depth {st['depth']}, spilled pages {st['spilled_pages']}, "
              f"count(QUEUE) after reopen {count}")
        print(f"peak RSS (VmHWM) {vm_hwm_kib() / 1024:.0f} MiB")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
