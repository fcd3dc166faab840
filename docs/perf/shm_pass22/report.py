#!/usr/bin/env python3
"""Twenty-second pass: prints the tables of docs/performance.md from the
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


def table(path, whos, title):
    times, order = load(path)
    print(f"\n{title} ({os.path.basename(path)}): us a call, median; speedup over Open MPI alone, median (range)")
    print('| call | bytes | Open MPI | ' + ' | '.join(whos) + ' | ' + ' | '.join(f'speedup, {w}' for w in whos) + ' |')
    print('| --- ' * (3 + 2 * len(whos)) + '|')
    for call, size in sorted(order, key=lambda k: (k[1], k[0])):
        row = [call, str(size), f"{statistics.median(times[(call, size, 'ompi')]):.3f}"]
        row += [f"{statistics.median(times[(call, size, w)]):.3f}" for w in whos]
        row += [cell(speedups(order[(call, size)], w)) for w in whos]
        print('| ' + ' | '.join(row) + ' |')


if os.path.exists(f'{here}/vforms.csv'):
    table(f'{here}/vforms.csv', ['before', 'after'], 'Step 1: the v-forms, p = 2, a946461 and db4d176')
for path in sorted(glob.glob(f'{here}/barriers_p*.csv')):
    table(path, ['chorus'], 'Step 2: barriers and broadcasts')
for path in sorted(glob.glob(f'{here}/allgatherv_dense_*.csv')):
    table(path, ['before', 'after'], 'The dense MPI_Allgatherv path (b4d2706), p = 2, the build before and after')
for path in sorted(glob.glob(f'{here}/allgatherv_p*.csv')):
    table(path, ['chorus'], 'Step 7: MPI_Allgatherv beside MPI_Allgather')
if os.path.exists(f'{here}/every_call_8B.csv'):
    table(f'{here}/every_call_8B.csv', ['chorus'], 'Step 3: every call at 8 B, p = 2, CHORUS_MPI_MIN_BYTES=0')
if os.path.exists(f'{here}/rooted_sizes.csv'):
    table(f'{here}/rooted_sizes.csv', ['chorus'], 'Step 4: rooted blocking calls, 24-256 B, p = 2')

large = sorted(glob.glob(f'{here}/large/*.csv'))
if large:
    import csv
    rows = [r for path in large for r in csv.DictReader(open(path))]
    print('\nStep 5: AllReduce p = 2 beside Open MPI alone, launch by launch (us; speedup over Open MPI\'s better column)')
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

if os.path.exists(f'{here}/first_barrier.csv'):
    rows = collections.defaultdict(list)
    for line in open(f'{here}/first_barrier.csv'):
        who, p, barrier, probe = line.strip().split(',')
        rows[(int(p), who)].append((float(barrier), float(probe)))
    print('\nStep 6: a program\'s first MPI_Barrier (the communicator\'s creation), ms, median (range)')
    print('| p | first barrier, before | first barrier, after | probe, before | probe, after |')
    print('| --- | --- | --- | --- | --- |')
    for p in sorted({p for p, _ in rows}):
        b, a = rows[(p, 'before')], rows[(p, 'after')]
        span = lambda xs: f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})"
        print(f"| {p} | {span([x[0] for x in b])} | {span([x[0] for x in a])} | "
              f"{span([x[1] for x in b])} | {span([x[1] for x in a])} |")
