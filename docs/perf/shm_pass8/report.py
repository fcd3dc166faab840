#!/usr/bin/env python3
"""Summarizes docs/perf/shm_pass8 (run.sh): medians over the runs."""
import csv, glob, os, re, statistics as st, sys
from collections import defaultdict

here = os.path.dirname(os.path.abspath(__file__))

def rows(pattern):
    """{(name-without-run, size): [row, ...]} over the runs' CSV files."""
    out = defaultdict(list)
    for f in sorted(glob.glob(os.path.join(here, pattern))):
        key = re.sub(r'_\d+\.csv$', '', os.path.basename(f))
        for r in csv.DictReader(open(f)):
            out[(key, int(r['size']))].append(r)
    return out

def med(values):
    return st.median(values) if values else float('nan')

print(open(os.path.join(here, 'copy_bench.txt')).read())

for mode in ('auto', 'auto_rewrite'):
    data = rows(mode + '_p*_*.csv')
    print(f"# AllReduce, automatic choice{' (--rewrite)' if 'rewrite' in mode else ''}: us, medians of 3; "
          "new/base time; in place / out of place time")
    print(f"{'p':>2} {'size':>8} {'base oop':>9} {'base ip':>9} {'new oop':>9} {'new ip':>9} "
          f"{'oop new/base':>12} {'ip new/base':>11} {'base ip/oop':>11} {'new ip/oop':>10}  algo (new)")
    for p in (2, 4):
        sizes = sorted({s for (k, s) in data if k == f'{mode}_p{p}_new'})
        for s in sizes:
            b = data[(f'{mode}_p{p}_base', s)]; n = data[(f'{mode}_p{p}_new', s)]
            bo = med([float(r['oop_time_us']) for r in b]); bi = med([float(r['ip_time_us']) for r in b])
            no = med([float(r['oop_time_us']) for r in n]); ni = med([float(r['ip_time_us']) for r in n])
            print(f"{p:>2} {s:>8} {bo:9.1f} {bi:9.1f} {no:9.1f} {ni:9.1f} {no / bo:12.2f} {ni / bi:11.2f} "
                  f"{bi / bo:11.2f} {ni / no:10.2f}  {n[0]['algo']}")
    print()

for series in ('mid', 'large'):
    data = rows(f'allreduce_{series}_p*.csv')
    print(f"# AllReduce beside Open MPI ({series}): speedup = MPI time / Chorus's better column, "
          "medians of 3; in place: MPI's better column / Chorus in place")
    print(f"{'p':>2} {'size':>8} {'chorus oop':>10} {'chorus ip':>9} {'mpi':>9} {'speedup':>7} {'ip speedup':>10}  algo")
    for (k, s), rs in sorted(data.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        o = med([float(r['oop_time_us']) for r in rs]); i = med([float(r['ip_time_us']) for r in rs])
        m = med([float(r['mpi_time_us']) for r in rs])
        sp = med([float(r['mpi_time_us']) / min(float(r['oop_time_us']), float(r['ip_time_us'])) for r in rs])
        ips = med([float(r['mpi_time_us']) / float(r['ip_time_us']) for r in rs])
        print(f"{k[-1]:>2} {s:>8} {o:10.1f} {i:9.1f} {m:9.1f} {sp:7.2f} {ips:10.2f}  {rs[0]['algo']}")
    print()

print("# allgather / alltoall at p = 2: out-of-place us, medians of 3")
for t in ('allgather', 'alltoall'):
    for size in ('1M', '64M'):
        b = rows(f'{t}_{size}_base_*.csv'); n = rows(f'{t}_{size}_new_*.csv')
        bt = med([float(r['oop_time_us']) for rs in b.values() for r in rs])
        nt = med([float(r['oop_time_us']) for rs in n.values() for r in rs])
        print(f"{t:>10} {size:>4}: base {bt:9.1f} new {nt:9.1f} new/base {nt / bt:.2f}")

print()
print("# Other collectives beside Open MPI: speedup = MPI time / Chorus's better column, medians of "
      "3 runs (8 for alltoall 1 MiB and broadcast 8 B at p = 4)")
print(f"{'collective':>15} {'p=2 8B':>7} {'1MiB':>6} {'64MiB':>6} {'p=4 8B':>7} {'1MiB':>6} {'64MiB':>6}")
for t in ('broadcast', 'reduce', 'allgather', 'alltoall', 'reduce_scatter'):
    cells = []
    for p in (2, 4):
        for size in ('8', '1M', '64M'):
            speedups = []
            for f in sorted(glob.glob(os.path.join(here, f'{t}_{size}_p{p}_*.csv'))):
                for r in csv.DictReader(open(f)):
                    times = [float(r['oop_time_us'])]
                    if r['ip_time_us'] not in ('NA', ''):
                        times.append(float(r['ip_time_us']))
                    speedups.append(float(r['mpi_time_us']) / min(times))
            cells.append(f"{med(speedups):.2f}" if speedups else "-")
    print(f"{t:>15} " + " ".join(f"{c:>6}" for c in cells))
