"""For the multiprocess executor's forkserver: ``start_method: {forkserver: {preload_modules:
["taxbreak.pipeline.preload"]}}`` builds the jobs of ``taxbreak.pipeline.local`` once in the server, so each step
process forked from it finds them built (about 2.6 s per step otherwise, on 2 cores: 8 small traces' batch spent
more time there than in its steps; bench/bench_marts.py).  Importing it builds them, which is all it does.
"""

from taxbreak.pipeline import local

local.warm()
