"""Side-by-side benchmarks of foundry-checkpoint against the usual checkpoint backends.

Run ``python -m benchmarks`` (``make bench``) from the repository root; it writes
``benchmarks/RESULTS.md``. Every measured unit (one workload for one backend) runs in a fresh
child process, so its peak memory is its own and no state leaks between backends. Timings
are medians of several repetitions; request and byte counts are deterministic. Nothing here
asserts on time.

Example::

    python -m benchmarks --quick                 # a 1-2 minute smoke run
    python -m benchmarks --only lg-read engine   # some sections only
"""
