# editmeter: `make help` lists the targets. Every target calls the `editmeter` command (benchmark/commands/cli.py).
# Online by default: `make bench` downloads the weights it needs when the network is there. The test suite, the
# demos and the bench-* scripts are offline by design (HF_HUB_OFFLINE=1 set for those targets only).
PYTHON      ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
EDITMETER   ?= $(VENV)/bin/editmeter
# Exact torch build for this project's machines; override elsewhere, e.g.
#   make install TORCH_SPEC="torch torchvision --index-url https://download.pytorch.org/whl/cu124"
TORCH_SPEC  ?= torch==2.14.1 torchvision==0.29.1
MODEL       ?= identity
QUERYSET    ?= demo
PROFILE     ?= pretrained
METRICS     ?= hatie
EDITS       ?=
NAME        ?=
KIND        ?= instruction
RESULTS     ?= results
DEMO_EDITORS ?= identity,oracle,overedit
# demo_mini = the first two demo scenes, 14 queries, all 7 edit types (FID, hence IQ and Total, needs two source
# images); a set of its own, so its rows are complete. DEMO_SET=demo runs all 133 queries.
DEMO_SET    ?= demo_mini
DIFFUSION_EDITORS ?= ip2p,magicbrush,sdedit,diffedit,p2p,imagic,ledits
DIFFUSION_LIMIT ?= 14
ARGS        ?=
# `make test` runs one pytest-xdist worker per core plus one (TEST_WORKERS=0: one process), each on one torch thread:
# the extra worker computes while another waits on a subprocess, a Slurm task or a sleeping editor (measured on
# this project's 2-core machine: 3 workers finished the suite in 753 s where 2 took 1129 s, both beside other jobs);
# --dist loadfile runs each test file on one worker, so a module's fixtures (a Slurm cluster, a browser, the demo
# runs several tests read) are built once, not once per worker; --no-loadscope-reorder hands the files out longest
# first (tests/conftest.py LONGEST_FILES), not by how many tests each holds.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null) && echo $$((n + 1)) || echo auto)
# Scale-out (docs/scale.md): GPUS=8 (or 0,2,5) shards `bench` and `sweep` over local GPUs through `editmeter launch`;
# WORKERS=N sets the shards per run (default: one per GPU); LAUNCHER=slurm submits them to Slurm instead.
GPUS        ?=
WORKERS     ?=
LAUNCHER    ?= local
SWEEP       ?=
LAUNCH      := $(EDITMETER) launch --launcher $(LAUNCHER) $(if $(GPUS),--gpus $(GPUS)) $(if $(WORKERS),--workers $(WORKERS)) paths.results=$(abspath $(RESULTS))

# Every run of a target writes under $(RESULTS); `show` reads the same folder.
RUN         := $(EDITMETER) run paths.results=$(abspath $(RESULTS))
SHOW        := $(EDITMETER) show --results $(RESULTS)
TINY        := queryset=demo profile=tiny
# One torch thread for the tiny models: they gain nothing from more, and on shared cores OpenMP spinning makes
# them erratic.
ONE_THREAD  := OMP_NUM_THREADS=1

.PHONY: gpu-check help install demo demo-arena demo-hatie demo-editval demo-diffusion demo-diffusion-run bench sweep score weights bench-hatie bench-suites bench-targets bench-backbones bench-editors bench-aggregate bench-judge data test test-all lint clean-results

# Offline by design: the demos and benchmarks use tiny random-weight models and bundled data; tests never touch
# the network. (Target-specific: `make bench`, `make weights` and `make data` stay online.)
demo demo-arena demo-hatie demo-diffusion demo-diffusion-run test bench-hatie bench-suites bench-targets bench-backbones bench-editors bench-judge gpu-check: export HF_HUB_OFFLINE = 1

help: ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 16

install: ## create .venv and install editmeter with test tools
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH_SPEC)
	$(PY) -m pip install --quiet -e ".[test,lint]"
	@$(PY) -c "import benchmark, torch; print('editmeter', benchmark.__version__, '| torch', torch.__version__)"

demo: ## offline, a few minutes (measured time: README, Setup): HATIE, pixel and EditVal leaderboards of the weight-free and tiny diffusion editors on DEMO_SET
	$(ONE_THREAD) $(RUN) --multirun editor=$(DEMO_EDITORS),$(DIFFUSION_EDITORS) queryset=$(DEMO_SET) profile=tiny metrics=basic $(ARGS)
	$(ONE_THREAD) $(RUN) --multirun editor=$(DEMO_EDITORS),$(DIFFUSION_EDITORS) queryset=$(DEMO_SET) profile=tiny metrics=hatie_oracle $(ARGS)
	$(ONE_THREAD) $(RUN) --multirun editor=identity,oracle queryset=demo_editval profile=tiny metrics=editval_oracle $(ARGS)
	@echo; echo "== leaderboards: HATIE and pixel metrics (tiny random weights: they test the pipeline, they do not rank editors) =="
	@echo "   metrics=hatie_oracle: HATIE on the demo world's exact masks (segmenter oracle-demo-render) for exact renders"
	@echo "   (identity, oracle); every other edit (overedit, diffusion) falls back to the tiny Mask R-CNN (docs/hatie.md)"
	@$(SHOW) --queryset $(DEMO_SET)
	@$(SHOW) --queryset demo_editval

demo-arena: ## offline, about a minute: three weight-free editors on demo_mini judged in pairs (GenArena's protocol) by a stand-in judge on 127.0.0.1, then a fourth (tiny ip2p): only its pairs are judged (docs/arena.md)
	$(ONE_THREAD) $(PY) scripts/tools/arena_demo.py --results $(abspath $(RESULTS))/arena_demo $(ARGS)

demo-diffusion: demo-diffusion-run ## only the tiny diffusion editors, first DIFFUSION_LIMIT demo queries, pixel metrics
	$(SHOW) --queryset demo

demo-diffusion-run:
	$(ONE_THREAD) $(RUN) --multirun editor=$(DIFFUSION_EDITORS) $(TINY) limit=$(DIFFUSION_LIMIT) $(ARGS)

.PHONY: demo-editval
demo-editval: export HF_HUB_OFFLINE = 1
demo-editval: ## EditVal suite (oracle detector, tiny DINO / FID) on the demo's 21 EditVal-type queries: identity and oracle
	$(ONE_THREAD) $(RUN) --multirun editor=identity,oracle queryset=demo_editval profile=tiny metrics=editval_oracle $(ARGS)
	$(SHOW) --queryset demo_editval

demo-hatie: ## HATIE suite on the oracle segmenter (tiny fallback), tiny backbones, whole demo set: identity, oracle, overedit
	$(ONE_THREAD) $(RUN) --multirun editor=$(DEMO_EDITORS) $(TINY) metrics=hatie_oracle $(ARGS)
	$(SHOW) --queryset demo

bench: ## run one editor on one query set (online: fetches weights): make bench MODEL=ip2p QUERYSET=hatie [PROFILE=tiny] [METRICS=hatie] [GPUS=8] [LAUNCHER=slurm] [ARGS="seed=1"]
	$(if $(GPUS)$(WORKERS)$(filter-out local,$(LAUNCHER)),$(LAUNCH),$(RUN)) editor=$(MODEL) queryset=$(QUERYSET) profile=$(PROFILE) metrics=$(METRICS) $(ARGS)

sweep: ## one run per editor setting, sharded like bench: make sweep MODEL=ip2p SWEEP="editor.guidance_scale=5,7.5 editor.image_guidance_scale=1.2,1.5" [GPUS=8]
	@test -n "$(SWEEP)" || { echo 'usage: make sweep MODEL=<editor> SWEEP="editor.<key>=<v1>,<v2> ..." (keys: configs/editor/<editor>.yaml)'; exit 2; }
	$(LAUNCH) editor=$(MODEL) queryset=$(QUERYSET) profile=$(PROFILE) metrics=$(METRICS) $(SWEEP) $(ARGS)

score: ## score edits made elsewhere: make score QUERYSET=hatie EDITS=<folder> NAME=<label> [KIND=description] [ARGS=...]
	$(EDITMETER) score --edits $(EDITS) --name $(NAME) --kind $(KIND) queryset=$(QUERYSET) profile=$(PROFILE) metrics=$(METRICS) paths.results=$(abspath $(RESULTS)) $(ARGS)

weights: ## prefetch every checkpoint a run needs: make weights MODEL=ip2p METRICS=hatie [PROFILE=pretrained]
	$(EDITMETER) weights editor=$(MODEL) metrics=$(METRICS) profile=$(PROFILE) $(ARGS)

bench-hatie: ## time the HATIE scoring stage, batched vs batch size 1 (real-size random-weight backbones, CPU)
	$(PY) scripts/bench/bench_hatie.py $(ARGS)

bench-suites: ## the same scoring figures for every suite: queries/s, forward share, non-forward ms/query by step: make bench-suites [ARGS="--metrics conventional --profile tiny --precision bf16"]
	$(PY) scripts/bench/bench_suites.py $(ARGS)

bench-targets: ## on a GPU machine, one command: HATIE scoring speed against its targets (docs/hatie.md#targets): make bench-targets [ARGS="--steps hatie,prefetch"]
	$(PY) scripts/bench/bench_scoring_targets.py $(ARGS)

bench-backbones: ## per-image forward time of each HATIE model by batch size (what batching alone can gain here)
	$(PY) scripts/bench/bench_backbones.py $(ARGS)

bench-aggregate: ## leaderboard rebuild at 50 runs x 50k rows vs adding the 51st with the aggregate cache: make bench-aggregate [ARGS="--resamples 200"]
	$(PY) scripts/bench/bench_aggregate.py $(ARGS)

bench-judge: ## is the judge the bottleneck? metrics=gedit through the endpoint backbone against a stand-in server answering after 0.2 s: make bench-judge [ARGS="--queries 64 --concurrency 16"]
	$(PY) scripts/bench/bench_judge.py $(ARGS)

gpu-check: ## self-check of a CUDA machine: every editor in fp16/bf16 with a rerun, every suite, real-size timings (one line and exit 0 without CUDA)
	$(EDITMETER) gpu-check $(ARGS)

bench-editors: ## edit-stage overhead vs the bare diffusers loop, batch sizes 1/2/4/8 (tiny profile, one CPU thread for the model)
	$(ONE_THREAD) $(PY) scripts/bench/bench_editors.py $(ARGS)

data: ## download one query-set source (resumable, verified): make data NAME=gqa_hatie|hatie|editval|magicbrush|gedit|pie|imgedit|kris|rise|editscore_judge|editreward_judge|genarena
	@test -n "$(NAME)" || { echo "usage: make data NAME=<set>  (sets: $$(ls datasets/manifests | sed 's/\.json//' | tr '\n' ' '))"; exit 2; }
	$(EDITMETER) data $(NAME) $(ARGS)

.PHONY: report
report: ## static HTML report of RESULTS (opens offline): make report [RESULTS=results] [OUT=<RESULTS>/report] [ARGS="--queryset demo"]
	$(EDITMETER) report --results $(RESULTS) $(if $(OUT),--out $(OUT)) $(ARGS)

test: ## offline test suite (HF_HUB_OFFLINE=1), one worker per core plus one; prints the slowest 20 tests
	$(ONE_THREAD) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20 $(ARGS)

lint: ## ruff
	$(PY) -m ruff check benchmark editors tests scripts

clean-results: ## delete everything under results/ (edits, scores, leaderboards)
	find results -mindepth 1 ! -name .gitkeep -delete
