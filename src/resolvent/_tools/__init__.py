"""The tools: the command line (`resolvent graph`, `resolvent bench`) and what only it
runs: the bench (its timing, report, probes and hand-written floor) and the reading of
trace files. The runtime never imports them."""
