#!/usr/bin/env python3
"""Twenty-fifth pass: prints the tables of docs/performance.md from the
CSVs run.sh wrote (call_loops' lines: who,call,bytes,us)."""
import glob
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, '..', 'shm_pass23'))
from report import table  # noqa: E402  (the twenty-third pass's tables, same CSVs)


def main():
    size = lambda path: int(path.rsplit('_', 1)[1][:-5])
    for step, title in (('rooted', 'Step 1: the rooted calls, before the small slots and this build'),
                        ('allreduce', 'Step 2: AllReduce and allgather, before the small slots and this build')):
        for p in (4, 2):
            for path in sorted(glob.glob(f'{here}/{step}_p{p}_*.csv'), key=size):
                table(path, ['before', 'after'], title, paired=True)


if __name__ == '__main__':
    main()
