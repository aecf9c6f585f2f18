"""Speed benchmarks of the library's building blocks. Each module runs as a script
(``python benchmarks/<name>.py`` or ``python -m benchmarks.<name>``) with ``main(argv) -> int``
and writes ``benchmarks/results/<name>.json``; the measured numbers are in
``benchmarks/RESULTS.md`` and on the papers' results pages. Not part of the installed package."""
