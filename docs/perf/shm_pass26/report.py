#!/usr/bin/env python3
"""Twenty-sixth pass: prints the tables of docs/performance.md from the
CSVs run.sh wrote."""
import os
import statistics

here = os.path.dirname(os.path.abspath(__file__))


def rows(name):
    with open(os.path.join(here, name)) as f:
        for line in f:
            who, *values = line.strip().split(',')
            yield who, [float(v) for v in values]


def first_calls():
    print('| p | build | creation + first call, ms | calls 2-256, us a call | calls 257-1024, us a call |')
    print('| --- | --- | --- | --- | --- |')
    for p in (2, 4):
        by = {}
        for who, values in rows(f'first_calls_p{p}.csv'):
            by.setdefault(who, []).append(values)
        for who in ('before', 'after'):
            cols = list(zip(*by[who]))
            cells = [f'{statistics.median(c):.2f} ({min(c):.2f}-{max(c):.2f})' for c in cols]
            print(f'| {p} | {who} | ' + ' | '.join(cells) + ' |')


def perf_cells():
    print('\n| build | cells 1-4 (calls 1-256), us | cells 5-16 (calls 257-1024), us |')
    print('| --- | --- | --- |')
    by = {}
    for who, values in rows('perf_cells_p4.csv'):
        by.setdefault(who, []).append(values)
    for who in ('before', 'after'):
        # each cell: 32 calls out of place, then 32 in place
        early = [statistics.mean(v[:8]) for v in by[who]]
        late = [statistics.mean(v[8:]) for v in by[who]]
        print(f'| {who} | {statistics.median(early):.1f} ({min(early):.1f}-{max(early):.1f}) | '
              f'{statistics.median(late):.1f} ({min(late):.1f}-{max(late):.1f}) |')


if __name__ == '__main__':
    first_calls()
    perf_cells()
