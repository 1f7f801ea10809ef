"""Control and status registers: one SystemRDL source (trainingcxl.rdl) compiled into the
register-map model (regmap.py), the Amaranth AXI4-Lite register block (regblock.py) and the
generated C header, Markdown and JSON (``python -m hw.csr.gen``)."""
