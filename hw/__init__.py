"""TrainingCXL device RTL (Amaranth 0.5).

Importing the package itself pulls in nothing: ``hw.config`` and ``hw.encodings`` are pure Python so
that the golden model may share encodings without importing Amaranth.
"""
