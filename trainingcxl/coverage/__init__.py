"""Code coverage of the RTL under the cosim tier (``trainingcxl coverage``, ``make coverage``).

``blocks`` maps generated-Verilog modules to hw blocks, ``data`` reads and merges Verilator's
coverage files, ``report`` writes ``summary.json`` and the HTML, ``functional`` holds the
functional coverage model sampled by the benches' monitors, ``cli`` runs it all.
``exclusions.toml`` lists every excluded point with its reason.
"""
