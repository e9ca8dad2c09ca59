"""What every run shares, below the maths and the models: run directories and their records
(:mod:`~limits.runs.results`), deferred Ctrl-C/SIGTERM (:mod:`~limits.runs.interrupts`),
progress bars (:mod:`~limits.runs.progress`) and comma-separated flag values
(:mod:`~limits.runs.parsing`). Imports nothing from the rest of ``limits`` but
:mod:`limits.errors`.
"""
