# editmeter: `make help` lists the targets.
PYTHON      ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python
# Exact torch build for this project's machines; override elsewhere, e.g.
#   make install TORCH_SPEC="torch torchvision --index-url https://download.pytorch.org/whl/cu124"
TORCH_SPEC  ?= torch==2.14.1 torchvision==0.29.1
MODEL       ?= identity
QUERYSET    ?= demo
PROFILE     ?= pretrained
METRICS     ?= hatie
EDITS       ?=
NAME        ?=
DEMO_EDITORS ?= identity,oracle,overedit
DIFFUSION_EDITORS ?= ip2p,magicbrush,sdedit,diffedit,p2p,imagic
DIFFUSION_LIMIT ?= 16
ARGS        ?=

export HF_HUB_OFFLINE ?= 1

.PHONY: help install demo demo-hatie demo-diffusion demo-diffusion-run bench score bench-hatie bench-backbones bench-editors data test test-all lint clean-results

help: ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 16

install: ## create .venv and install editmeter with test tools
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(TORCH_SPEC)
	$(PY) -m pip install --quiet -e ".[test,lint]"
	@$(PY) -c "import benchmark, torch; print('editmeter', benchmark.__version__, '| torch', torch.__version__)"

demo: ## whole pipeline offline on the demo set: weight-free editors + tiny diffusion editors (DIFFUSION_LIMIT queries)
	$(PY) -m benchmark.run --multirun editor=$(DEMO_EDITORS) queryset=demo profile=tiny $(ARGS)
	$(MAKE) --no-print-directory demo-diffusion-run
	$(PY) -m benchmark.leaderboard show --queryset demo

demo-diffusion: demo-diffusion-run ## only the tiny diffusion editors, first DIFFUSION_LIMIT demo queries
	$(PY) -m benchmark.leaderboard show --queryset demo

# One torch thread: tiny models gain nothing from more, and on shared cores OpenMP spinning makes them erratic.
demo-diffusion-run:
	OMP_NUM_THREADS=1 $(PY) -m benchmark.run --multirun editor=$(DIFFUSION_EDITORS) queryset=demo profile=tiny limit=$(DIFFUSION_LIMIT) $(ARGS)

demo-hatie: ## HATIE suite, tiny random backbones, on the demo set (identity and overedit)
	$(PY) -m benchmark.run --multirun editor=identity,overedit queryset=demo profile=tiny metrics=hatie $(ARGS)
	$(PY) -m benchmark.leaderboard show --queryset demo

bench: ## run one editor on one query set: make bench MODEL=ip2p QUERYSET=hatie [PROFILE=tiny] [METRICS=hatie] [ARGS="seed=1"]
	$(PY) -m benchmark.run editor=$(MODEL) queryset=$(QUERYSET) profile=$(PROFILE) metrics=$(METRICS) $(ARGS)

score: ## score edits made elsewhere: make score QUERYSET=hatie EDITS=<folder> NAME=<label> [ARGS="kind=description"]
	$(PY) -m benchmark.score_edits queryset=$(QUERYSET) edits=$(EDITS) name=$(NAME) profile=$(PROFILE) metrics=$(METRICS) $(ARGS)

bench-hatie: ## time the HATIE scoring stage, batched vs batch size 1 (real-size random-weight backbones, CPU)
	$(PY) scripts/bench_hatie.py $(ARGS)

bench-backbones: ## per-image forward time of each HATIE model by batch size (what batching alone can gain here)
	$(PY) scripts/bench_backbones.py $(ARGS)

bench-editors: ## edit-stage overhead vs the bare diffusers loop, batch sizes 1/2/4/8 (tiny profile, one CPU thread for the model)
	OMP_NUM_THREADS=1 $(PY) scripts/bench_editors.py $(ARGS)

data: ## download one query-set source (resumable, verified): make data NAME=gqa_hatie|hatie|editval|magicbrush
	@test -n "$(NAME)" || { echo "usage: make data NAME=<set>  (sets: $$(ls datasets/manifests | sed 's/\.json//' | tr '\n' ' '))"; exit 2; }
	HF_HUB_OFFLINE=0 $(PY) scripts/download.py $(NAME) $(ARGS)

test: ## offline test suite (HF_HUB_OFFLINE=1)
	$(PY) -m pytest -q $(ARGS)

lint: ## ruff
	$(PY) -m ruff check benchmark editors tests scripts

clean-results: ## delete everything under results/ (edits, scores, leaderboards)
	find results -mindepth 1 ! -name .gitkeep -delete
