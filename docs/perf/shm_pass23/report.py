#!/usr/bin/env python3
"""Twenty-third pass: prints the tables of docs/performance.md from the
CSVs run.sh wrote (lines: who,call,bytes,us)."""
import collections
import glob
import os
import statistics

here = os.path.dirname(os.path.abspath(__file__))


def load(path):
    times = collections.defaultdict(list)  # (call, bytes, who) -> us of each run
    order = collections.defaultdict(list)  # (call, bytes) -> (who, us) in run order
    for line in open(path):
        who, call, size, us = line.strip().split(',')
        times[(call, int(size), who)].append(float(us))
        order[(call, int(size))].append((who, float(us)))
    return times, order


def speedups(order, who):
    """Open MPI's time over `who`'s, run by run (each launch against the Open MPI launch before it)."""
    out, last_ompi = [], None
    for w, us in order:
        if w == 'ompi':
            last_ompi = us
        elif w == who and last_ompi is not None:
            out.append(last_ompi / us)
    return out


def cell(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def table(path, whos, title, paired=False):
    times, order = load(path)
    print(f"\n{title} ({os.path.relpath(path, here)}): us a call, median; speedup over Open MPI alone, median (range)")
    print('| call | bytes | Open MPI | ' + ' | '.join(whos) + ' | ' + ' | '.join(f'speedup, {w}' for w in whos) +
          (f' | {whos[0]} / {whos[1]}' if paired else '') + ' |')
    print('| --- ' * (3 + 2 * len(whos) + paired) + '|')
    for call, size in sorted(order, key=lambda k: (k[1], k[0])):
        row = [call, str(size), f"{statistics.median(times[(call, size, 'ompi')]):.3f}"]
        row += [f"{statistics.median(times[(call, size, w)]):.3f}" for w in whos]
        row += [cell(speedups(order[(call, size)], w)) for w in whos]
        if paired:  # launch by launch, the first `who`'s time over the second's
            first = [us for w, us in order[(call, size)] if w == whos[0]]
            second = [us for w, us in order[(call, size)] if w == whos[1]]
            row.append(cell([a / b for a, b in zip(first, second)]))
        print('| ' + ' | '.join(row) + ' |')


def main():
    for path in sorted(glob.glob(f'{here}/nonblocking_p*.csv')):
        table(path, ['before', 'after'], 'Step 1: the nonblocking calls, 129ae98 and this build', paired=True)
    for path in sorted(glob.glob(f'{here}/candidates_p*.csv')) + sorted(glob.glob(f'{here}/*_series/candidates_p*.csv')):
        table(path, ['chorus'], 'Step 2: the calls that kept the threshold')
    if os.path.exists(f'{here}/every_call_8B.csv'):
        table(f'{here}/every_call_8B.csv', ['chorus'], 'Step 3: every call at 8 B, p = 2, CHORUS_MPI_MIN_BYTES=0')

    if os.path.exists(f'{here}/engine_alone.csv'):
        rows = collections.defaultdict(lambda: collections.defaultdict(list))  # who -> kind -> us
        for line in open(f'{here}/engine_alone.csv'):
            who, kind, us = line.strip().split(',')
            rows[who][kind].append(float(us))
        print('\nStep 4: the engine alone, 8-byte allgather at p = 2 (us a call, median (range) of every round)')
        print('| library | blocking | async, waited at once | what async adds |')
        print('| --- | --- | --- | --- |')
        span = lambda xs: f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"
        for who in ('before', 'after'):
            b, a = rows[who]['block'], rows[who]['async']
            print(f"| {who} | {span(b)} | {span(a)} | {statistics.median(a) - statistics.median(b):.3f} |")

    if os.path.exists(f'{here}/first_call.csv'):
        rows = collections.defaultdict(list)
        for line in open(f'{here}/first_call.csv'):
            who, first, second = line.strip().split(',')
            rows[who].append((float(first), float(second)))
        print('\nStep 5: the first 64 MiB in-place AllReduce, halving_doubling, CHORUS_SHM=0, p = 2 (ms, median (range))')
        print('| library | first call | second call |')
        print('| --- | --- | --- |')
        span = lambda xs: f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"
        for who in ('before', 'after'):
            print(f"| {who} | {span([r[0] for r in rows[who]])} | {span([r[1] for r in rows[who]])} |")
    large = sorted(glob.glob(f'{here}/large/*.csv'))
    if large:
        import csv
        rows = [r for path in large for r in csv.DictReader(open(path))]
        print('\nStep 6: AllReduce p = 2 beside Open MPI alone, launch by launch (us; speedup over Open MPI\'s better column)')
        print('| size | Chorus out of place | Chorus in place | Open MPI out of place | Open MPI in place | out of place / better | in place / better |')
        print('| --- | --- | --- | --- | --- | --- | --- |')
        for size in sorted({int(r['size']) for r in rows}):
            ratios = ([], [])
            for r in (r for r in rows if int(r['size']) == size):
                best = min(float(r['mpi_time_us']), float(r['mpi_ip_time_us']))
                oop, ip = float(r['oop_time_us']), float(r['ip_time_us'])
                ratios[0].append(best / oop)
                ratios[1].append(best / ip)
                print(f"| {size >> 20} MiB | {oop:.0f} | {ip:.0f} | {float(r['mpi_time_us']):.0f} | "
                      f"{float(r['mpi_ip_time_us']):.0f} | {best / oop:.2f} | {best / ip:.2f} |")
            print(f"| {size >> 20} MiB, median (range) | | | | | {cell(ratios[0])} | {cell(ratios[1])} |")

    if os.path.isdir(f'{here}/targets'):
        # Steps 7 and 8 in the sixteenth pass's tables (its report.py reads the
        # working directory's CSVs).
        import sys
        sys.path.insert(0, os.path.join(here, '..', 'shm_pass16'))
        import report as pass16  # noqa: E402
        os.chdir(f'{here}/targets')
        print()
        pass16.others("Step 7: every other collective (speedup = MPI time / Chorus out-of-place time; each run's "
                      "cell the median of 5 rounds, Chorus and MPI in turn; median (range) of 3 runs; Chorus / MPI us)")
        pass16.allreduce("Step 8: AllReduce beside Open MPI (speedup = MPI time / Chorus time; each run's cell the "
                         "median of 5 rounds, Chorus and MPI in turn; median (range) of 3 runs)")


if __name__ == '__main__':
    main()
