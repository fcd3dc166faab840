#!/usr/bin/env python3
"""Twenty-fourth pass: prints the tables of docs/performance.md from the
CSVs run.sh wrote (call_loops' lines: who,call,bytes,us; the engine's:
who,p,async,time)."""
import collections
import glob
import os
import statistics
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, '..', 'shm_pass23'))
from report import table  # noqa: E402  (the twenty-third pass's tables, same CSVs)


def engine_alone(path):
    rows = collections.defaultdict(list)  # (who, p) -> time of every round
    for line in open(path):
        who, p, _, time = line.strip().split(',')
        rows[(who, int(p))].append(float(time))
    print('\nStep 3: the engine alone, an 8-byte allgather made async and waited for at once '
          '(median (range) of every round of 5 launches)')
    print('| p | 5cdf827 | this build | this build / 5cdf827 |')
    print('| --- | --- | --- | --- |')
    for p, unit in ((1, 'ns'), (2, 'us')):
        before, after = rows[('before', p)], rows[('after', p)]
        span = lambda xs: f"{statistics.median(xs):.3g} ({min(xs):.3g}-{max(xs):.3g}) {unit}"
        print(f"| {p} | {span(before)} | {span(after)} | "
              f"{statistics.median(after) / statistics.median(before):.2f} |")


def alltoall_1m(directory):
    import csv
    print('\nStep 4: alltoall 1 MiB beside Open MPI in the same launch (speedup = MPI time / Chorus time)')
    print('| p | launch by launch | median | Chorus us, median | Open MPI us, median |')
    print('| --- | --- | --- | --- | --- |')
    for p in (2, 4):
        paths = sorted(glob.glob(f'{directory}/a2a_p{p}_*.csv'), key=lambda x: int(x.rsplit('_', 1)[1][:-4]))
        rows = [next(csv.DictReader(open(path))) for path in paths]
        speedups = [float(r['speedup']) for r in rows]
        print(f"| {p} | {' '.join(f'{x:.2f}' for x in speedups)} | {statistics.median(speedups):.2f} | "
              f"{statistics.median(float(r['oop_time_us']) for r in rows):.1f} | "
              f"{statistics.median(float(r['mpi_time_us']) for r in rows):.1f} |")


def main():
    for path in sorted(glob.glob(f'{here}/nonblocking_p*.csv')):
        table(path, ['before', 'after'], 'Step 1: the nonblocking calls, 5cdf827 and this build', paired=True)
    for path in sorted(glob.glob(f'{here}/candidates_p*.csv')):
        table(path, ['chorus'], 'Step 2: the calls that kept the threshold')
    if os.path.exists(f'{here}/engine_alone.csv'):
        engine_alone(f'{here}/engine_alone.csv')
    if os.path.isdir(f'{here}/alltoall_1M'):
        alltoall_1m(f'{here}/alltoall_1M')


if __name__ == '__main__':
    main()
